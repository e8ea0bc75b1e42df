"""Warp-specialized W4A16 GEMV for one token (kernels/csrc/w4a16_ws_gemv.cu) over the compress.int4 layout as it is:
built with nvcc on first use (kernels/cuda_build.py), loaded through ctypes, launched on torch's current stream.

Why a third one-token GEMV: the CUDA-core GEMV (kernels/w4a16_cc.py) keeps its weight bytes in flight in registers and
the tensor-core GEMV (kernels/w4a16_cuda.py) in rings its math warps refill between their math, so on the H200 both
stay ~3 us above a plain read of an 8B layer. Here one producer warp per CTA keeps a shared-memory ring of TMA bulk
copies in flight and the other warps only compute: the CUDA-core GEMV's math, or mma.sync on a 16-row tile they share
(the config picks). Measured by bench/results/h200/kernels_s30/ws_ab.py (its README has the figures).

Covered: M = 1, K a multiple of 8, N a multiple of 8, group 64 / 128, symmetric and asymmetric, fp16 or bf16
activations with scales of the same dtype, 16-byte aligned tensors. `supports` answers without raising; the runtime's
PathTable times it against the other int4 paths per (shape, M) and keeps the fastest (on a shape without a measured
config, under each of SEARCH_CONFIGS: `candidate_configs`). COMPRESS_W4A16_WS=0 turns it off;
COMPRESS_W4A16_WS_CONFIG=i forces a launch config (CONFIGS); COMPRESS_W4A16_PDL (kernels/w4a16_cuda.py) picks plain
launches, programmatic dependent launch, or (the default) the same with the weight copies started before the previous
kernel is done. The plain-torch reference of the same math is kernels.w4a16.w4a16_linear_ref.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, w4a16_cc, w4a16_cuda
from kernels.op_dispatch import direct_call, on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "w4a16_ws_gemv.cu"
# Launch configs, as the .cu's CONFIGS table: (consumer warps, rows per warp, 512-byte spans of a row a ring stage holds,
# ring stages). 16: the tensor-core consumer (mma.sync; its warps share one 16-row tile); fewer: the CUDA-core consumer.
CONFIGS = [(8, 2, 2, 6), (8, 4, 2, 3), (4, 4, 1, 8), (8, 2, 4, 3), (8, 2, 4, 4), (16, 1, 4, 3), (8, 1, 8, 3),
           (16, 1, 2, 6), (4, 2, 4, 6), (8, 2, 2, 4), (4, 2, 2, 8), (8, 1, 4, 6), (8, 1, 2, 8),
           (8, 16, 2, 6), (8, 16, 2, 4), (4, 16, 2, 6), (8, 16, 4, 3)]
DEFAULT_CONFIG = 0  # (8, 2, 2, 6): the fastest on the 8B q/o, k/v, gate/up and fused gate_up layers (session 30)
# Measured fastest config per (N, K), per GPU (a key the GPU's name holds). A shape without an entry is offered under
# each of SEARCH_CONFIGS (below); the runtime's path table serves the default config unless another's single call is
# faster by more than compress.runtime.paths.VARIANT_MARGIN (`compress bench e2e --tune-paths` times them in the graph).
TUNED_BY_GPU: dict[str, dict[tuple[int, int], int]] = {
    # session 30 (bench/results/h200/kernels_s30/ws_ab.py, rotate timing, us of this entry against the default's)
    "H200": {
        # measured fastest at DEFAULT_CONFIG (listed, so that they are not searched again: SEARCH_CONFIGS)
        (4096, 4096): 0, (1024, 4096): 0, (14336, 4096): 0, (28672, 4096): 0,  # 8B q/o, k/v, gate/up, fused gate_up
        (6144, 4096): 2,    # 8B fused q/k/v: 6.35 -> 5.40 (call 1; 6.36 -> 5.44 call 2)
        (4096, 14336): 9,   # 8B down: 13.23 -> 11.24 (calls 3, 5)
        (1024, 8192): 5,    # 70B k/v: 4.19 -> 3.80 (calls 2, 3)
        (8192, 8192): 14,   # 70B q/o: 14.90 -> 11.82 (call 6)
        (28672, 8192): 9,   # 70B gate/up: 49.33 -> 35.40 (calls 3, 5)
        (8192, 28672): 16,  # 70B down: 50.13 -> 37.92 (call 6)
        # session 33 (bench/results/h200/kernels_s33/ws_graph_cfg.py): fused shapes and a Qwen3 one that had no entry
        # (so ran DEFAULT_CONFIG), chosen inside the decode step's CUDA graph: TPOT of the synthetic model (batch 1,
        # every int4 layer on this GEMV) with each config in turn on this shape, ms of this entry against the default's
        (57344, 8192): 9,   # 70B fused gate_up (8 layers): 1.881 -> 1.661 (call 5; the unfused gate/up's entry)
        (10240, 8192): 12,  # 70B fused q/k/v: 1.899 -> 1.882 (call 5)
        (4096, 12288): 14,  # Qwen3-8B down: 2.004 -> 1.964 (call 5)
        (24576, 4096): 0,   # Qwen3-8B fused gate_up: the default, 1.961 (call 5; the next best 14: 1.979)
    },
}
_RC = {-1: "bad config index", -2: "group_size not 64/128", -3: "K not a positive multiple of 8",
       -4: "x, qweight, scales or zeros not 16-byte aligned", -5: "the ring and staged x over the shared memory of an SM",
       -6: "N not a multiple of 8"}


def enabled() -> bool:
    return os.environ.get("COMPRESS_W4A16_WS", "1") != "0"


# What a shape without a measured config is offered as, as separate path candidates that the runtime's path table times
# (compress.runtime.formats_compress, compress.runtime.paths): the default and every config an entry of TUNED_BY_GPU
# holds. Why: session 33's 70B fused gate_up had no entry and ran the default, its decode step 11% slower than with its
# unfused twin's config (bench/results/h200/kernels_s33/README.md); on a GPU without a table every shape is new.
SEARCH_CONFIGS = tuple(sorted({DEFAULT_CONFIG, *(c for t in TUNED_BY_GPU.values() for c in t.values())}))


def measured_config(n: int, k: int, gpu: str | None = None) -> int | None:
    """COMPRESS_W4A16_WS_CONFIG if set, else the entry for (N, K) of the GPU named `gpu` (TUNED_BY_GPU), else None."""
    forced = w4a16_cc.env_config("COMPRESS_W4A16_WS_CONFIG", len(CONFIGS))
    if forced is not None:
        return forced
    key = cuda_build.gpu_key(TUNED_BY_GPU, gpu)
    return TUNED_BY_GPU[key].get((n, k)) if key is not None else None


def config_for(n: int, k: int, gpu: str | None = None) -> int:
    """The launch config when none is given: `measured_config`, else DEFAULT_CONFIG."""
    c = measured_config(n, k, gpu)
    return DEFAULT_CONFIG if c is None else c


def candidate_configs(n: int, k: int, gpu: str | None = None) -> list[int]:
    """The configs to offer the path table for (N, K): the measured one alone, else SEARCH_CONFIGS (the default
    first)."""
    c = measured_config(n, k, gpu)
    return [c] if c is not None else [DEFAULT_CONFIG, *(x for x in SEARCH_CONFIGS if x != DEFAULT_CONFIG)]


def describe(config: int) -> str:
    c, r, u, s = CONFIGS[config]
    return f"cuda ws tc gemv c{c}u{u}s{s}" if r == 16 else f"cuda ws gemv c{c}r{r}u{u}s{s}"


def planned(n: int, k: int, device: torch.device) -> str:
    """The served launch as text, for benchmark tables."""
    return describe(config_for(n, k, w4a16_cuda.gpu_name(device)))


def compile_variant(arch_code: str, name: str = "ws") -> Path:
    """Build (or find cached) the library; one library holds every config (`name` only for kernel_suites.prebuild)."""
    return cuda_build.compile_library(SRC, name, [], arch_code, "w4a16 warp-specialized GEMV", "the other int4 paths serve")


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.w4ws_gemv.restype = i
    so.w4ws_gemv.argtypes = [p, i, p, p, p, p, i, i, i, i, i, i, p]
    so.w4ws_num_configs.restype = i


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device) -> ctypes.CDLL:
    key = (cuda_build.arch(device), "ws")
    return _libraries.get(key, lambda: compile_variant(key[0]))


def _check(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
           group_size: int) -> tuple[int, int]:
    n, k = w4a16_cc._check(x, qweight, scales, zeros, group_size)  # one token, K % 8, shapes, dtypes, device
    if n % 8:
        raise CompressError(f"w4a16_ws_gemv: out_features={n} is not a multiple of 8; use kernels.w4a16_cc.w4a16_cc_gemv")
    for name, t in (("qweight", qweight), ("scales", scales), ("zeros", zeros)):
        if t is not None and t.data_ptr() % 16:
            raise CompressError(f"w4a16_ws_gemv: {name} is not 16-byte aligned (a view into another tensor?); pass "
                                f"{name}.clone()")
    return n, k


def supports(x2: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
             group_size: int) -> bool:
    """True when `w4a16_ws_gemv` can run this call here (the launcher's checks, and a successful build)."""
    return w4a16_cc.runs_here(enabled(), _check, build, x2, qweight, scales, zeros, group_size)


def _launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
            config: int | None = None, pdl: int | None = None, max_grid: int = 0) -> torch.Tensor:
    n, k = _check(x, qweight, scales, zeros, group_size)
    x1 = x.reshape(k).contiguous()
    if x1.data_ptr() % 16:
        x1 = x1.clone()
    out = torch.empty(*x.shape[:-1], n, device=x.device, dtype=x.dtype)
    config = config_for(n, k, w4a16_cuda.gpu_name(x.device)) if config is None else config
    pdl = w4a16_cuda.pdl_mode() if pdl is None else int(pdl)
    rc = build(x.device).w4ws_gemv(
        x1.data_ptr(), int(x.dtype == torch.bfloat16), qweight.data_ptr(), scales.data_ptr(),
        None if zeros is None else zeros.data_ptr(), out.data_ptr(), n, k, group_size, config, {0: 0, 1: 1, 2: 3}[pdl],
        max_grid, cuda_build.stream_handle(x.device))
    if rc != 0:
        raise CompressError(f"w4a16 warp-specialized GEMV: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; "
                            f"N={n}, K={k}, group {group_size}, config {config})")
    return out


class PreparedGemv:
    """`w4a16_ws_gemv` for one layer's fixed weights: the weights' checks, the launch config, the launch mode
    (COMPRESS_W4A16_PDL, read here once) and the library are settled when it is made, so that a call checks only x.

    Why: an eager decode step calls each layer's GEMV once a token, and `w4a16_ws_gemv` spends most of its host time
    re-checking weights that do not change (session 39 on an H200 machine: 15-22 us of a 22-35 us call, the kernel
    itself 4-11 us). The runtime's int4 layers keep one per launch config (compress.runtime.formats_compress.Int4Linear).

    `prepared(x)` returns exactly what `w4a16_ws_gemv(x, qweight, scales, zeros, group_size, config=config)` returns;
    an x it was not made for (another dtype, device or K, or a traced call) goes through `w4a16_ws_gemv` itself, which
    then raises its own error or serves it. The weights must stay where they are (the layer drops its prepared calls
    when its tensors move: QuantLinear._apply)."""

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int, k: int,
                 config: int | None = None):
        probe = torch.empty(1, k, dtype=scales.dtype, device=qweight.device)
        self.n, self.k = _check(probe, qweight, scales, zeros, group_size)  # the call's checks, once
        self.qweight, self.scales, self.zeros, self.group_size = qweight, scales, zeros, group_size
        self.device, self.dtype, self.index = qweight.device, scales.dtype, qweight.get_device()
        self.config = config_for(self.n, k, w4a16_cuda.gpu_name(self.device)) if config is None else config
        if not 0 <= self.config < len(CONFIGS):
            raise CompressError(f"w4a16_ws_gemv: config={config} is not an index of CONFIGS (0..{len(CONFIGS) - 1})")
        self._launcher = build(self.device).w4ws_gemv
        self._weights = (qweight.data_ptr(), scales.data_ptr(), None if zeros is None else zeros.data_ptr())
        self._shape = (self.n, k, group_size, self.config, {0: 0, 1: 1, 2: 3}[w4a16_cuda.pdl_mode()], 0)
        self._bf16 = int(self.dtype == torch.bfloat16)

    @on_input_device
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not self.dtype or x.get_device() != self.index or x.numel() != self.k or x.shape[-1] != self.k \
                or not direct_call(x):
            return w4a16_ws_gemv(x, self.qweight, self.scales, self.zeros, self.group_size, config=self.config)
        x1 = x.reshape(self.k)
        if not x1.is_contiguous() or x1.data_ptr() % 16:
            x1 = x1.clone()
        out = torch.empty(*x.shape[:-1], self.n, device=self.device, dtype=self.dtype)
        rc = self._launcher(x1.data_ptr(), self._bf16, *self._weights, out.data_ptr(), *self._shape,
                            cuda_build.stream_handle(self.device))
        if rc != 0:
            raise CompressError(f"w4a16 warp-specialized GEMV: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; "
                                f"N={self.n}, K={self.k}, group {self.group_size}, config {self.config})")
        return out


def _w4a16_ws_gemv_op_impl(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                           group_size: int, config: int) -> torch.Tensor:
    return _launch(x, qweight, scales, zeros, group_size, None if config < 0 else config)


_w4a16_ws_gemv_op = torch.library.custom_op("compress::w4a16_ws_gemv", _w4a16_ws_gemv_op_impl, mutates_args=())


@_w4a16_ws_gemv_op.register_fake
def _(x, qweight, scales, zeros, group_size, config):
    return x.new_empty(*x.shape[:-1], qweight.shape[0])


@on_input_device
def w4a16_ws_gemv(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                  group_size: int = 128, bias: torch.Tensor | None = None, config: int | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias) for one token, W in the compress.int4 layout.

    x (..., K) fp16/bf16 holding one token, K % 8 == 0; qweight int32 (N, Kp/8), N % 8 == 0; scales (G, N) in x's
    dtype; zeros uint8 (G, N) or None (symmetric, z = 8). config: an index of CONFIGS (None: `config_for`). Returns
    (..., N) in x's dtype.
    """
    if config is not None and not 0 <= config < len(CONFIGS):
        raise CompressError(f"w4a16_ws_gemv: config={config} is not an index of CONFIGS (0..{len(CONFIGS) - 1}); "
                            "pass None for the measured one")
    cfg = -1 if config is None else int(config)
    if direct_call(x, qweight, scales, zeros):  # eager: the launcher itself (kernels.op_dispatch)
        y = _w4a16_ws_gemv_op_impl(x, qweight, scales, zeros, group_size, cfg)
    else:
        _check(x, qweight, scales, zeros, group_size)  # here too: the custom op would wrap the error
        y = torch.ops.compress.w4a16_ws_gemv(x, qweight, scales, zeros, group_size, cfg)
    return y + bias if bias is not None else y
