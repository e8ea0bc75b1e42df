"""CUDA C++ few-token VPTQ kernel (kernels/csrc/vptq_gemm.cu): y = x @ W_hat^T for 1..64 tokens, each codebook row
looked up once per call (both codebooks in shared memory) and multiplied with every token on the tensor cores.
Built with nvcc on first use (kernels/cuda_build.py), loaded through ctypes, launched on torch's current stream.

Why: at 2-64 tokens the runtime had the Triton GEMV (per token), dequantize + cuBLAS (the whole fp16 weight
written and read back every call) and the Triton few-token kernel (kernels/vptq.py `_vptq_gemm_kernel`, gathers
through L1). On the H100 at 8 tokens, 8B gate/up (14336 x 4096, 4096 + 256 centroids) took 190 us, 191 us and
366 us that way, fp16 F.linear 42 us (session 21, bench/results/h100/kernels_s21/).

Covered: 1..64 tokens, vector length 8, fp16 codebooks of 12- or 13-bit indices (up to 4096 / 8192 centroids),
residual of 0, 8 or 9 bits, fp16 or bf16 activations, fp16 scale / bias (or none), N a multiple of 64, K a
multiple of 16, no outlier columns. `supports` says whether a call is covered (and builds the library once);
kernels/vptq.py sends covered `vptq_gemm` calls here and the rest to the Triton kernel. COMPRESS_VPTQ_GEMM_CUDA=0
turns it off. The plain-torch reference is kernels.vptq.vptq_linear_ref.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, vptq_cuda
from kernels.op_dispatch import on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "vptq_gemm.cu"
MAX_M = 64
TILE_N = 512  # outputs per CTA (8 warps x 8 vector slots x 8)
MAIN_BITS = (12, 13)
RES_BITS = (0, 8, 9)

_warned: list[bool] = []
_libraries = cuda_build.Libraries(lambda so: _bind(so))
_workspace = cuda_build.SplitKWorkspace()


def enabled() -> bool:
    return os.environ.get("COMPRESS_VPTQ_GEMM_CUDA", "1") != "0"


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.vptq_gemm.restype = i
    so.vptq_gemm.argtypes = [p, i, i, p, p, i, i, p, p, i, i, p, p, p, p, i, i, i, i, i, p]
    so.vptq_gemm_workspace_floats.restype = ctypes.c_long
    so.vptq_gemm_workspace_floats.argtypes = [i, i, i]
    so.vptq_gemm_smem_bytes.restype = ctypes.c_long
    so.vptq_gemm_smem_bytes.argtypes = [i, i]


def compile_for(arch_code: str) -> Path:
    """Build (or find cached) the library for an architecture code such as "90a"."""
    return cuda_build.compile_library(SRC, "gemm", [], arch_code, "vptq few-token CUDA kernel", "using the Triton kernel")


def compile_variant(arch_code: str, variant: str = "gemm") -> Path:
    """`compile_for` under the kernel-cache builder's signature (one variant)."""
    return compile_for(arch_code)


def build(device: torch.device) -> ctypes.CDLL:
    arch = cuda_build.arch(device)
    return _libraries.get(arch, lambda: compile_for(arch))


def smem_bytes(index_bits: int, res_bits: int) -> int:
    """Dynamic shared memory per CTA (mirrors gemm_smem in the .cu): main codebook room for every index, the
    residual codebook in 8 copies."""
    return (16 << index_bits) + (8 * 16 << res_bits if res_bits else 0)


def covers(x2: torch.Tensor, n: int, codebook: torch.Tensor, index_bits: int, res_codebook: torch.Tensor | None,
           res_index_bits: int | None, scale: torch.Tensor | None, bias: torch.Tensor | None) -> bool:
    """The call shapes the kernel takes (module docstring), checked before any build."""
    if not enabled() or x2.device.type != "cuda" or not 1 <= x2.shape[0] <= MAX_M or codebook.shape[1] != 8:
        return False
    rb = res_index_bits if res_codebook is not None else 0
    if index_bits not in MAIN_BITS or rb not in RES_BITS or n % 64 or x2.shape[1] % 16:
        return False
    if x2.dtype not in (torch.float16, torch.bfloat16):
        return False
    if not vptq_cuda.operands_ok(codebook, res_codebook, scale, bias):
        return False
    major = cuda_build.capability(x2.device)[0]
    return major >= 8 and smem_bytes(index_bits, rb) + 1024 <= vptq_cuda.smem_limit(x2.device)


def supports(x2: torch.Tensor, n: int, codebook: torch.Tensor, index_bits: int, res_codebook: torch.Tensor | None,
             res_index_bits: int | None, scale: torch.Tensor | None, bias: torch.Tensor | None) -> bool:
    """True when the CUDA kernel covers this call and its library builds (a failed build warns once)."""
    if not covers(x2, n, codebook, index_bits, res_codebook, res_index_bits, scale, bias):
        return False
    try:
        build(x2.device)
    except CompressError as e:
        if not _warned:
            warnings.warn(str(e), stacklevel=2)
            _warned.append(True)
        return False
    return True


def _ctas_per_sm(m: int, index_bits: int, res_bits: int) -> int:
    """Two CTAs an SM up to 16 tokens where both fit its shared memory (their registers fit: 128 a thread); one above."""
    return 2 if m <= 16 and smem_bytes(index_bits, res_bits) + 1024 <= 113 * 1024 else 1


def plan(m: int, n: int, k: int, sms: int, index_bits: int, res_bits: int) -> int:
    """Slices of K (S): enough CTAs to fill the GPU once (twice where two fit an SM), each slice at least a few
    16-column steps so the codebook copy each CTA makes stays a small part of its work."""
    tiles = -(-n // TILE_N)
    steps = k // 16
    return max(1, min(steps // 4 or 1, round(_ctas_per_sm(m, index_bits, res_bits) * sms / tiles)))


def split_candidates(m: int, n: int, k: int, sms: int, index_bits: int, res_bits: int) -> list[int]:
    """Slices of K worth timing for one call shape (the runtime's path table times each): the plan, the most that
    fit one wave of CTAs, and the most that fit two. Why not the plan alone: at 32-64 tokens one CTA fits an SM, and
    the plan's 5 slices of 8B gate/up made 140 CTAs for 132 SMs, a second wave of 8 (Nsight Compute, session 21
    call 6); 7 slices took 136 us where 5 took 151 (call 3, the same launch geometry)."""
    tiles = -(-n // TILE_N)
    resident = _ctas_per_sm(m, index_bits, res_bits) * sms  # CTAs in one wave
    steps = max(1, k // 16)
    picks = [plan(m, n, k, sms, index_bits, res_bits)]
    for waves in (1, 2):
        picks.append(max(1, min(steps, waves * resident // tiles)))
    return sorted(set(picks))


@on_input_device
def gemm(x2: torch.Tensor, n: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
         res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
         scale: torch.Tensor | None, bias: torch.Tensor | None, out: torch.Tensor, split: int | None = None) -> torch.Tensor:
    """out (M, n) = x2 (M, K) @ W_hat^T. The caller has checked shapes (kernels.vptq._check) and `supports`.
    split: slices of K (default `plan`)."""
    lib = build(x2.device)
    m, k = x2.shape
    has_res = res_codebook is not None
    rb = res_index_bits if has_res else 0
    sms = torch.cuda.get_device_properties(x2.device).multi_processor_count
    s = min(split or plan(m, n, k, sms, index_bits, rb), max(1, k // 16))
    ws, _ = _workspace.get(x2.device, lib.vptq_gemm_workspace_floats(m, n, s), 1)
    x2 = x2.contiguous()  # the kernel reads x as 4-byte pairs of a (M, K) row-major block
    rc = lib.vptq_gemm(
        x2.data_ptr(), int(x2.dtype == torch.bfloat16), m, indices.data_ptr(), codebook.data_ptr(), codebook.shape[0],
        index_bits, res_indices.data_ptr() if has_res else None, res_codebook.data_ptr() if has_res else None,
        res_codebook.shape[0] if has_res else 0, rb, scale.data_ptr() if scale is not None else None,
        bias.data_ptr() if bias is not None else None, out.data_ptr(), ws.data_ptr(), n, k, indices.shape[1],
        res_indices.shape[1] if has_res else 1, s, cuda_build.stream_handle(x2.device))
    if rc != 0:
        raise CompressError(f"vptq few-token CUDA kernel: launch failed with code {rc} (m={m}, n={n}, k={k}, "
                            f"bits={index_bits}/{rb}, split={s}); COMPRESS_VPTQ_GEMM_CUDA=0 runs the Triton kernel instead")
    return out
