"""Warp-specialized W4A16 GEMM for 2-16 tokens (kernels/csrc/w4a16_ws_gemm.cu) over the compress.int4 layout as it is:
built with nvcc on first use (kernels/cuda_build.py), loaded through ctypes, launched on torch's current stream.

Why: at 16 tokens the tensor-core GEMV (kernels/w4a16_cuda.py) runs at 1.6x its one-token time on the H200, its math
warps refilling their own cp.async rings and each reloading the activations for its 16 rows. This kernel keeps the
one-token warp-specialized GEMV's weight ring (one producer warp of TMA bulk copies, kernels/w4a16_ws.py) and lets each
consumer warp load a block's activation fragments once for several 16-row tiles.

Covered: M = 2..16 tokens (the launcher also takes 1), K a multiple of 8, N a multiple of 8, group 64 / 128, symmetric
and asymmetric, fp16 or bf16 activations with scales of the same dtype, 16-byte aligned tensors. Where M x K x 2 bytes of
x are more than a config's budget, K is split over several CTAs per row group, their fp32 sums added in chunk order (the
same bytes every call): through distributed shared memory when the chunks of a row group run as one thread-block cluster
(2..8 chunks, the cluster reduction), else through a workspace in global memory. `supports` answers without raising;
the runtime's PathTable times it against the other int4 paths per (shape, M) and keeps the fastest.
COMPRESS_W4A16_WS_GEMM=0 turns it off; COMPRESS_W4A16_WS_GEMM_CONFIG=i forces a launch config (CONFIGS);
COMPRESS_W4A16_WS_GEMM_CLUSTER=0 keeps split K on the workspace; COMPRESS_W4A16_PDL (kernels/w4a16_cuda.py) picks the
launch mode. The plain-torch reference of the same math is kernels.w4a16.w4a16_linear_ref.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, w4a16_cc, w4a16_cuda
from kernels.w4a16 import padded_k
from kernels.op_dispatch import direct_call, on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "w4a16_ws_gemm.cu"
# Launch configs, as the .cu's CONFIGS table: (consumer warps, 16-row tiles of a row group, 512-byte spans of a row a
# ring stage holds, at most this many ring stages: the launch takes as many as fit beside x, KB of x a CTA stages: where
# M x K x 2 bytes are more, K is split over that many CTAs per row group, their sums added through a workspace).
CONFIGS = [(8, 2, 2, 4, 64), (16, 1, 2, 8, 64), (8, 1, 2, 8, 64), (8, 1, 2, 4, 64), (16, 1, 2, 4, 64), (8, 2, 2, 3, 64),
           (16, 2, 2, 4, 64), (8, 2, 1, 8, 64), (8, 2, 2, 4, 32), (16, 2, 2, 4, 32), (8, 2, 2, 4, 160),
           (16, 1, 2, 4, 32)]
DEFAULT_CONFIG = 0  # (8, 2, 2, 4, 64): the fastest on most layers and token counts of session 31's first sweep (H200)
# Measured fastest config per (N, K, token bucket) where it beat DEFAULT_CONFIG by more than 2%, per GPU (a key the GPU's
# name holds). A call of M tokens looks up the smallest bucket >= M (BUCKETS).
BUCKETS = (2, 4, 8, 16)
TUNED_BY_GPU: dict[str, dict[tuple[int, int, int], int]] = {
    # session 31, bench/results/h200/kernels_s31/wsm_ab.py time (call 3, rotate timing; us of the entry / the default's)
    "H200": {
        (4096, 4096, 2): 6, (4096, 4096, 4): 6, (4096, 4096, 8): 6,  # 8B q/o: 6.28 / 5.97, 6.97 / 6.44, 9.14 / 8.27
        (1024, 4096, 2): 1, (1024, 4096, 4): 1,  # 8B k/v: 4.34 / 3.62, 5.00 / 4.59
        (1024, 4096, 8): 9, (1024, 4096, 16): 9,  # 6.61 / 5.33, 7.87 / 6.20
        (14336, 4096, 16): 10,  # 8B gate/up: 31.78 / 25.70
        (4096, 14336, 4): 6, (4096, 14336, 8): 6, (4096, 14336, 16): 6,  # 8B down: 19.86 / 18.95, 23.37 / 21.76, 46.13 / 40.34
        (8192, 8192, 8): 6, (8192, 8192, 16): 6,  # 70B q/o: 24.17 / 22.61, 37.64 / 36.32
        (1024, 8192, 2): 2, (1024, 8192, 4): 9, (1024, 8192, 8): 9, (1024, 8192, 16): 6,  # 70B k/v: 8.19 / 6.01, 8.63 /
        # 6.35, 8.66 / 6.15, 8.91 / 8.46
        (28672, 8192, 2): 3, (28672, 8192, 16): 6,  # 70B gate/up: 50.95 / 45.28, 124.9 / 118.7
        (8192, 28672, 2): 10, (8192, 28672, 4): 6, (8192, 28672, 8): 6, (8192, 28672, 16): 6,  # 70B down: 60.52 / 56.24,
        # 65.41 / 62.11, 87.42 / 79.26, 182.5 / 150.9
        (6144, 4096, 4): 6, (6144, 4096, 8): 6,  # 8B fused q/k/v: 9.28 / 8.93, 11.59 / 10.49
        (28672, 4096, 2): 3, (28672, 4096, 16): 10,  # 8B fused gate_up: 26.41 / 25.08, 61.19 / 37.73
        # session 36, bench/results/h200/kernels_s36/cluster_ab.py (call 1, with the cluster reduction): us of the
        # default / the entry; the other bucket-8 and -16 entries above were the fastest there too
        (14336, 4096, 8): 2,  # 8B gate/up: 17.91 / 17.50
        (28672, 8192, 8): 6,  # 70B gate/up: 60.74 / 57.69 (session 31: config 10)
    },
}
# (N, K, token bucket) where the entry's split of K measured faster on the workspace than through a cluster, per GPU
# (session 36, cluster_ab.py call 1, us cluster / workspace): few row groups per CTA (the k/v layers) or 4-7 chunks of a
# long K at 8 tokens, where the cluster's own barriers are not hidden behind a next row group.
WORKSPACE_BY_GPU: dict[str, set[tuple[int, int, int]]] = {
    "H200": {(1024, 4096, 16), (1024, 8192, 16), (1024, 8192, 8),  # 8B k/v 7.17 / 6.03; 70B k/v 9.52 / 8.22,
             (4096, 14336, 8)},  # 7.34 / 6.16; 8B down 22.74 / 21.79
}
MAX_M = 16
MAX_CLUSTER = 8  # the .cu's MAX_CLUSTER: portable thread-block cluster size
_X_PAD_BYTES = 32  # after each token's staged x (the .cu's XPAD pieces)
_STATIC_SMEM = (2 * 8 + 5) * 8 + 16  # the ring's mbarriers, x's and the cluster reduction's, the split-K flag
_RC = {-1: "bad config index", -2: "group_size not 64/128", -3: "K not a positive multiple of 8",
       -4: "x, qweight, scales or zeros not 16-byte aligned",
       -5: "a K chunk of x and two ring stages over the shared memory of an SM",
       -6: "N not a multiple of 8", -7: "M not in 1..16", -8: "K split without a workspace"}


def enabled() -> bool:
    return os.environ.get("COMPRESS_W4A16_WS_GEMM", "1") != "0"


def cluster_reduce() -> bool:
    """Whether a split of K may add its chunks' sums in a thread-block cluster (COMPRESS_W4A16_WS_GEMM_CLUSTER,
    default on)."""
    return os.environ.get("COMPRESS_W4A16_WS_GEMM_CLUSTER", "1") != "0"


def clustered(m: int, k: int, config: int, cluster: bool) -> bool:
    """True when a launch with `cluster` asked for runs its split of K as clusters: 2..MAX_CLUSTER chunks."""
    return cluster and 1 < split(m, k, config)[0] <= MAX_CLUSTER


def _bucket(m: int) -> int:
    return next((b for b in BUCKETS if m <= b), BUCKETS[-1])


def config_for(n: int, k: int, m: int, gpu: str | None = None) -> int:
    """COMPRESS_W4A16_WS_GEMM_CONFIG if set, else the entry for (N, K, M's bucket) of the GPU named `gpu`
    (TUNED_BY_GPU), else DEFAULT_CONFIG."""
    forced = w4a16_cc.env_config("COMPRESS_W4A16_WS_GEMM_CONFIG", len(CONFIGS))
    if forced is not None:
        return forced
    key = cuda_build.gpu_key(TUNED_BY_GPU, gpu)
    return TUNED_BY_GPU[key].get((n, k, _bucket(m)), DEFAULT_CONFIG) if key is not None else DEFAULT_CONFIG


def cluster_for(n: int, k: int, m: int, gpu: str | None = None) -> bool:
    """Whether a split of K adds through a cluster: cluster_reduce(), unless (N, K, M's bucket) is in the GPU's
    WORKSPACE_BY_GPU."""
    if not cluster_reduce():
        return False
    key = cuda_build.gpu_key(WORKSPACE_BY_GPU, gpu)
    return key is None or (n, k, _bucket(m)) not in WORKSPACE_BY_GPU[key]


def describe(config: int) -> str:
    c, rt, u, s, xkb = CONFIGS[config]
    return f"cuda ws gemm c{c}t{rt}u{u}s{s}x{xkb}"


def planned(n: int, k: int, m: int, device: torch.device) -> str:
    """The served launch as text, for benchmark tables ("cluster" where its split of K adds through a cluster)."""
    gpu = w4a16_cuda.gpu_name(device)
    config = config_for(n, k, m, gpu)
    return describe(config) + (" cluster" if clustered(m, k, config, cluster_for(n, k, m, gpu)) else "")


def split(m: int, k: int, config: int) -> tuple[int, int]:
    """(K chunks, K values of a chunk) of a launch (the .cu's chunk_len): the padded K where M tokens of x fit the
    config's budget, else chunks of the longest multiple of 128 that does."""
    kp, xkb = padded_k(k), CONFIGS[config][4]
    kcl = kp if m * kp * 2 <= xkb * 1024 else max(128, xkb * 1024 // (m * 2) // 128 * 128)
    return -(-kp // kcl), kcl


def shared_bytes(m: int, k: int, config: int, group_size: int, asym: bool, stages: int, cluster: bool = False) -> int:
    """Shared memory of a launch (the .cu's smem_bytes + its static part): x of one K chunk, its 2^e per block, the
    warps' partials, the cluster reduction's two receive buffers (when `cluster` and K splits in 2..8), `stages` ring
    stages."""
    c, rt, u, _, _ = CONFIGS[config]
    chunks, kcl = split(m, k, config)
    rb, gs = 16 * rt, u * 1024 // group_size
    r16 = lambda v: (v + 15) // 16 * 16  # noqa: E731
    stage = rb * (u * 512 + 64) + r16(gs * rb * 2) + (r16(gs * rb) if asym else 0)
    up = (kcl // 128 + 3) // 4 * 4
    mt = 2 if m > 8 else 1
    slice_len = (-(-m * rb // chunks) + 3) // 4 * 4  # the .cu's slice_len
    recv = 2 * chunks * slice_len * 4 if clustered(m, k, config, cluster) else 0
    return (m * (kcl * 2 + _X_PAD_BYTES) + m * up * 4 + c * 8 * mt * (rb + 4) * 4 + recv + stages * stage +
            _STATIC_SMEM)


def fits(m: int, k: int, config: int, group_size: int, asym: bool, device: torch.device,
         cluster: bool | None = None) -> bool:
    """True when a K chunk of x and two ring stages fit one SM's shared memory (what the launcher needs); `cluster`
    None: as cluster_reduce() says."""
    optin = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
    cluster = cluster_reduce() if cluster is None else cluster
    return shared_bytes(m, k, config, group_size, asym, 2, cluster) <= optin


def compile_variant(arch_code: str, name: str = "wsm") -> Path:
    """Build (or find cached) the library; one library holds every config (`name` only for kernel_suites.prebuild)."""
    return cuda_build.compile_library(SRC, name, [], arch_code, "w4a16 warp-specialized GEMM", "the other int4 paths serve")


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.w4wsm_gemm.restype = i
    so.w4wsm_gemm.argtypes = [p, i, p, p, p, p, p, p, i, i, i, i, i, i, i, p]
    so.w4wsm_num_configs.restype = i


_workspace = cuda_build.SplitKWorkspace()


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device) -> ctypes.CDLL:
    key = (cuda_build.arch(device), "wsm")
    return _libraries.get(key, lambda: compile_variant(key[0]))


def _check(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
           group_size: int) -> tuple[int, int, int]:
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if not 1 <= m <= MAX_M:
        raise CompressError(f"w4a16_ws_gemm: M={m} tokens; this GEMM takes 1..{MAX_M}, use kernels.w4a16.w4a16_linear")
    if k % 8:
        raise CompressError(f"w4a16_ws_gemm: in_features={k} is not a multiple of 8; use kernels.w4a16_cuda.w4a16_gemv")
    n, k = w4a16_cuda._check(x, qweight, scales, zeros, group_size)  # shapes, dtypes, layout, then the device
    if n % 8:
        raise CompressError(f"w4a16_ws_gemm: out_features={n} is not a multiple of 8; use kernels.w4a16_cuda.w4a16_gemv")
    for name, t in (("qweight", qweight), ("scales", scales), ("zeros", zeros)):
        if t is not None and t.data_ptr() % 16:
            raise CompressError(f"w4a16_ws_gemm: {name} is not 16-byte aligned (a view into another tensor?); pass "
                                f"{name}.clone()")
    return m, n, k


def supports(x2: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
             group_size: int) -> bool:
    """True when `w4a16_ws_gemm` can run this call here: 2..16 CUDA tokens, the launcher's checks, a successful build,
    and a K chunk of x with two ring stages within an SM's shared memory. Never raises: a bad config override is left
    to the launch, whose one-line error the runtime's path table records (as for the one-token GEMVs)."""
    k = x2.shape[-1]
    m = x2.numel() // k if k else 0
    if not enabled() or x2.device.type != "cuda" or not 2 <= m <= MAX_M or k % 8:
        return False
    try:
        _, n, _ = _check(x2, qweight, scales, zeros, group_size)
        build(x2.device)
    except CompressError:
        return False  # no nvcc or a failed build: the other int4 paths serve (w4a16_cuda says why, once)
    gpu = w4a16_cuda.gpu_name(x2.device)
    try:
        config = config_for(n, k, m, gpu)
    except CompressError:
        return True  # a bad COMPRESS_W4A16_WS_GEMM_CONFIG: the launch raises it and the path table reports it
    return fits(m, k, config, group_size, zeros is not None, x2.device, cluster_for(n, k, m, gpu))


def _launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
            config: int | None = None, pdl: int | None = None, max_grid: int = 0,
            cluster: bool | None = None) -> torch.Tensor:
    m, n, k = _check(x, qweight, scales, zeros, group_size)
    x2 = x.reshape(m, k).contiguous()
    if x2.data_ptr() % 16:
        x2 = x2.clone()
    out = torch.empty(*x.shape[:-1], n, device=x.device, dtype=x.dtype)
    gpu = w4a16_cuda.gpu_name(x.device)
    config = config_for(n, k, m, gpu) if config is None else config
    pdl = w4a16_cuda.pdl_mode() if pdl is None else int(pdl)
    cluster = cluster_for(n, k, m, gpu) if cluster is None else cluster
    chunks, rows = split(m, k, config)[0], 16 * CONFIGS[config][1]
    groups = -(-n // rows)
    on_workspace = chunks > 1 and not clustered(m, k, config, cluster)
    ws, cnt = _workspace.get(x.device, chunks * groups * m * rows, groups) if on_workspace else (None, None)
    rc = build(x.device).w4wsm_gemm(
        x2.data_ptr(), int(x.dtype == torch.bfloat16), qweight.data_ptr(), scales.data_ptr(),
        None if zeros is None else zeros.data_ptr(), out.data_ptr(), None if ws is None else ws.data_ptr(),
        None if cnt is None else cnt.data_ptr(), m, n, k, group_size, config, {0: 0, 1: 1, 2: 3}[pdl] | 4 * cluster,
        max_grid,
        cuda_build.stream_handle(x.device))
    if rc != 0:
        raise CompressError(f"w4a16 warp-specialized GEMM: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; "
                            f"M={m}, N={n}, K={k}, group {group_size}, config {config})")
    return out


def _w4a16_ws_gemm_op_impl(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                           group_size: int) -> torch.Tensor:
    return _launch(x, qweight, scales, zeros, group_size)


_w4a16_ws_gemm_op = torch.library.custom_op("compress::w4a16_ws_gemm", _w4a16_ws_gemm_op_impl, mutates_args=())


@_w4a16_ws_gemm_op.register_fake
def _(x, qweight, scales, zeros, group_size):
    return x.new_empty(*x.shape[:-1], qweight.shape[0])


@on_input_device
def w4a16_ws_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                  group_size: int = 128, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias) for 1..16 tokens, W in the compress.int4 layout.

    x (..., K) fp16/bf16 with 1..16 tokens, K % 8 == 0; qweight int32 (N, Kp/8), N % 8 == 0; scales (G, N) in x's
    dtype; zeros uint8 (G, N) or None (symmetric, z = 8). Returns (..., N) in x's dtype.
    """
    if direct_call(x, qweight, scales, zeros):  # eager: the launcher itself (kernels.op_dispatch)
        y = _w4a16_ws_gemm_op_impl(x, qweight, scales, zeros, group_size)
    else:
        _check(x, qweight, scales, zeros, group_size)  # here too: the custom op would wrap the error
        y = torch.ops.compress.w4a16_ws_gemm(x, qweight, scales, zeros, group_size)
    return y + bias if bias is not None else y
