"""CUDA-core W4A16 GEMV for one token (kernels/csrc/w4a16_cc_gemv.cu) over the compress.int4 layout as it is:
built with nvcc on first use (kernels/cuda_build.py), loaded through ctypes, launched on torch's current stream.

Why beside the tensor-core GEMV (kernels/w4a16_cuda.py): at one token an mma uses one of its 8 columns, and that
GEMV's frame (one 16-warp CTA an SM, cp.async rings) keeps it above a plain read of the weights on the H200. This one
keeps each lane's 16-byte weight words in registers, in small CTAs, and sums in fp16 over 16 products at a time with
x scaled by a power of two per call so nothing overflows (the .cu header has the math and the layout of x in shared
memory). Measured first by bench/results/h200/kernels_s29/cc_gemv_probe.cu.

Covered: M = 1, K a multiple of 8, group 64 / 128, symmetric and asymmetric, fp16 or bf16 activations with scales of
the same dtype. `supports` answers without raising; the runtime's PathTable times it against the other int4 paths
per (shape, M) and keeps the fastest. COMPRESS_W4A16_CC=0 turns it off; COMPRESS_W4A16_CC_CONFIG=i forces a launch
config (CONFIGS), COMPRESS_W4A16_CC_PERSIST=1 / 0 a persistent grid or not; COMPRESS_W4A16_PDL (kernels/w4a16_cuda.py) picks plain launches, programmatic dependent launch, or
(the default) the same with the weights read before the previous kernel is done.
The plain-torch reference of the same math is kernels.w4a16.w4a16_linear_ref.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, w4a16_cuda
from kernels.op_dispatch import direct_call, on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "w4a16_cc_gemv.cu"
# Launch configs, as the .cu's CONFIGS table: (warps per CTA, rows per warp, 16-byte chunks a row in flight per lane).
CONFIGS = [(8, 2, 2), (8, 1, 4), (16, 2, 4), (4, 2, 2), (8, 2, 4), (16, 1, 4)]
DEFAULT_CONFIG = 0  # (8, 2, 2): the fastest on most of the 12 layer shapes below
# Measured fastest (config, persistent grid) per (N, K) where it is not (DEFAULT_CONFIG, PERSISTENT), per GPU (a key the
# GPU's name holds). H200: session 29, calls 6 and 8 (bench/results/h200/kernels_s29/cc_ab.py, rotate timing, one
# process, us of this entry against the default's). No other GPU has been measured: elsewhere the defaults serve.
TUNED_BY_GPU: dict[str, dict[tuple[int, int], tuple[int, bool]]] = {
    "H200": {
        (1024, 4096): (1, False),    # 8B k/v: 3.06 -> 2.62 (call 6)
        (1024, 8192): (5, False),    # 70B k/v: 5.49 -> 4.43 (call 6)
        (4096, 14336): (5, False),   # 8B down: 14.29 -> 12.16 (call 6)
        (4096, 12288): (5, False),   # Qwen3-8B down: 12.32 -> 10.57 (call 6)
        (8192, 8192): (2, False),    # 70B q/o: 12.70 -> 12.56 (call 6)
        (8192, 28672): (2, False),   # 70B down: 45.02 -> 37.33 (call 6)
        (28672, 8192): (0, True),    # 70B gate/up: 39.15 -> 35.71 (call 8)
        (28672, 4096): (0, True),    # 8B fused gate_up: 21.27 -> 19.15 (call 8)
        (24576, 4096): (0, True),    # Qwen3-8B fused gate_up: 18.09 -> 16.78 (call 8)
    },
}
PERSISTENT = False  # one CTA per row group; a persistent grid won only on the widest layers (call 8)
_RC = {-1: "bad config index", -2: "group_size not 64/128", -3: "K not a positive multiple of 8",
       -4: "x or qweight not 16-byte aligned", -5: "staged x over the shared memory of a block"}


def enabled() -> bool:
    return os.environ.get("COMPRESS_W4A16_CC", "1") != "0"


def _tuned(n: int, k: int, gpu: str | None) -> tuple[int, bool] | None:
    key = cuda_build.gpu_key(TUNED_BY_GPU, gpu)
    return None if key is None else TUNED_BY_GPU[key].get((n, k))


def env_config(var: str, count: int) -> int | None:
    """The launch config index the environment variable `var` forces (None where unset), checked against `count`
    configs: the override of this GEMV and of the warp-specialized one (kernels/w4a16_ws.py)."""
    env = os.environ.get(var)
    if env is None:
        return None
    if not env.isdigit() or int(env) >= count:
        raise CompressError(f"{var}={env!r} is not a config index 0..{count - 1}; unset it")
    return int(env)


def config_for(n: int, k: int, gpu: str | None = None) -> int:
    """COMPRESS_W4A16_CC_CONFIG if set, else the entry for (N, K) of the GPU named `gpu` (TUNED_BY_GPU), else
    DEFAULT_CONFIG."""
    forced = env_config("COMPRESS_W4A16_CC_CONFIG", len(CONFIGS))
    if forced is not None:
        return forced
    got = _tuned(n, k, gpu)
    return DEFAULT_CONFIG if got is None else got[0]


def describe(config: int, persist: bool = False) -> str:
    w, r, u = CONFIGS[config]
    return f"cuda cc gemv w{w}r{r}u{u}" + (" persistent" if persist else "")


def compile_variant(arch_code: str, name: str = "cc") -> Path:
    """Build (or find cached) the library; one library holds every config (`name` only for kernel_suites.prebuild)."""
    return cuda_build.compile_library(SRC, name, [], arch_code, "w4a16 CUDA-core GEMV", "the other int4 paths serve")


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.w4cc_gemv.restype = i
    so.w4cc_gemv.argtypes = [p, i, p, p, p, p, i, i, i, i, i, p]
    so.w4cc_num_configs.restype = i


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device) -> ctypes.CDLL:
    key = (cuda_build.arch(device), "cc")
    return _libraries.get(key, lambda: compile_variant(key[0]))


def _check(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
           group_size: int) -> tuple[int, int]:
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if m != 1:
        raise CompressError(f"w4a16_cc_gemv: M={m} tokens; this GEMV takes one token, use kernels.w4a16_cuda.w4a16_gemv")
    if k % 8:
        raise CompressError(f"w4a16_cc_gemv: in_features={k} is not a multiple of 8; use kernels.w4a16_cuda.w4a16_gemv")
    return w4a16_cuda._check(x, qweight, scales, zeros, group_size)  # shapes, dtypes, layout, then the device


def runs_here(on: bool, check, build_lib, x2: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
              zeros: torch.Tensor | None, group_size: int) -> bool:
    """True when a one-token GEMV module (this one, kernels/w4a16_ws.py) that is `on` can run this call here: one CUDA
    token with K % 8 == 0, its launcher's `check`, and a successful `build_lib(device)`. Never raises."""
    k = x2.shape[-1]
    if not on or x2.device.type != "cuda" or x2.numel() != k or k % 8:
        return False
    try:
        check(x2, qweight, scales, zeros, group_size)
        build_lib(x2.device)
    except CompressError:
        return False  # no nvcc or a failed build: the other int4 paths serve (w4a16_cuda says why, once)
    return True


def supports(x2: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
             group_size: int) -> bool:
    """True when `w4a16_cc_gemv` can run this call here (the launcher's checks, and a successful build)."""
    return runs_here(enabled(), _check, build, x2, qweight, scales, zeros, group_size)


def persistent(n: int | None = None, k: int | None = None, gpu: str | None = None) -> bool:
    """COMPRESS_W4A16_CC_PERSIST=1 / 0: a persistent grid (as many CTAs as fit at once, each staging x once for several
    row groups) / one CTA per row group; unset: the entry for (N, K) of the GPU named `gpu`, else PERSISTENT."""
    v = os.environ.get("COMPRESS_W4A16_CC_PERSIST")
    if v is None:
        got = _tuned(n, k, gpu) if n is not None else None
        return PERSISTENT if got is None else got[1]
    if v not in ("0", "1"):
        raise CompressError(f"COMPRESS_W4A16_CC_PERSIST={v!r} is not 0 or 1; unset it or pick one")
    return v == "1"


def plan(n: int, k: int, device: torch.device) -> tuple[int, bool]:
    """(config, persistent grid) served for an (N, K) layer on `device`: `config_for` and `persistent` on its GPU."""
    gpu = w4a16_cuda.gpu_name(device)
    return config_for(n, k, gpu), persistent(n, k, gpu)


def planned(n: int, k: int, device: torch.device) -> str:
    """The served launch as text, for benchmark tables."""
    return describe(*plan(n, k, device))


def _launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
            config: int | None = None, pdl: int | None = None, persist: bool | None = None) -> torch.Tensor:
    n, k = _check(x, qweight, scales, zeros, group_size)
    x1 = x.reshape(k).contiguous()
    if x1.data_ptr() % 16:
        x1 = x1.clone()
    out = torch.empty(*x.shape[:-1], n, device=x.device, dtype=x.dtype)
    served_config, served_persist = plan(n, k, x.device)
    config = served_config if config is None else config
    pdl = w4a16_cuda.pdl_mode() if pdl is None else int(pdl)
    persist = served_persist if persist is None else persist
    rc = build(x.device).w4cc_gemv(
        x1.data_ptr(), int(x.dtype == torch.bfloat16), qweight.data_ptr(), scales.data_ptr(),
        None if zeros is None else zeros.data_ptr(), out.data_ptr(), n, k, group_size, config,
        {0: 0, 1: 1, 2: 3}[pdl] | (4 if persist else 0),
        cuda_build.stream_handle(x.device))
    if rc != 0:
        raise CompressError(f"w4a16 CUDA-core GEMV: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; N={n}, "
                            f"K={k}, group {group_size}, config {config})")
    return out


def _w4a16_cc_gemv_op_impl(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                           group_size: int) -> torch.Tensor:
    return _launch(x, qweight, scales, zeros, group_size)


_w4a16_cc_gemv_op = torch.library.custom_op("compress::w4a16_cc_gemv", _w4a16_cc_gemv_op_impl, mutates_args=())


@_w4a16_cc_gemv_op.register_fake
def _(x, qweight, scales, zeros, group_size):
    return x.new_empty(*x.shape[:-1], qweight.shape[0])


@on_input_device
def w4a16_cc_gemv(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                  group_size: int = 128, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias) for one token, W in the compress.int4 layout.

    x (..., K) fp16/bf16 holding one token, K % 8 == 0; qweight int32 (N, Kp/8); scales (G, N) in x's dtype; zeros
    uint8 (G, N) or None (symmetric, z = 8). Returns (..., N) in x's dtype.
    """
    if direct_call(x, qweight, scales, zeros):  # eager: the launcher itself (kernels.op_dispatch)
        y = _w4a16_cc_gemv_op_impl(x, qweight, scales, zeros, group_size)
    else:
        _check(x, qweight, scales, zeros, group_size)  # here too: the custom op would wrap the error
        y = torch.ops.compress.w4a16_cc_gemv(x, qweight, scales, zeros, group_size)
    return y + bias if bias is not None else y
