"""CUDA C++ VPTQ decode GEMV (kernels/csrc/vptq_gemv.cu): build with nvcc on first use, load through
ctypes, launch on torch's current stream.

Why not Triton: the GEMV is bound by random 16-byte codebook reads; Triton 3.6 puts them through L1
(one cache line per thread, about 32 SM clocks per warp-wide gather), while the CUDA kernel holds
both codebooks in shared memory (see the .cu header for the layout). Why ctypes and no torch
extension: the source has no torch headers, so nvcc builds it in about 20 s instead of a minute.

Covered: batch 1 (M = 1), vector length 8, fp16 codebooks, main index bits 12 or 13 (4096 / 8192
centroids), residual bits 0, 8 or 9 (none / 256 / 512), fp16 or bf16 x, fp16 scale / bias. Anything
else, or no nvcc, goes to the Triton kernel (`supports` says which). COMPRESS_VPTQ_CUDA=0 turns it off.
No re-layout of the checkpoint: the kernel reads the packed index stream of notes/VPTQ_FORMAT.md as is.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import warnings
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build
from kernels.op_dispatch import on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "vptq_gemv.cu"
MAIN_BITS = (12, 13)
RES_BITS = (0, 8, 9)
# Build variants: name -> (warps per CTA, rolled main loop, codebook by bulk copy). See the .cu header.
VARIANTS = {"w16": (16, 0, 0), "w16r": (16, 1, 0), "w8": (8, 0, 0), "w8r": (8, 1, 0), "w16b": (16, 0, 1)}
# Measured (H100, kernels/vptq_probe.py, 16 seed-000 rows, geometric-mean ratio to torch): w16 0.888,
# w8 + cluster 2 0.962, w8 0.998, w8r 1.02; the seed-000 table in bench/results/h100/kernels_vptq ran w16.
DEFAULT_VARIANT = "w16"
# Cost model behind `plan` (H100, kernels/vptq_probe.py, 2026-11-22): one SM decodes a vector (main +
# residual lookups, shared-memory bound) in about 0.24 ns; each extra partial of a tile's split-K adds
# about 0.06 us to the tail (the last CTA sums the partials). GT=4 pays ~10% more per vector.
NS_PER_VECTOR = {8: 0.24, 4: 0.26}
US_PER_PARTIAL = 0.06
# CTAs per cluster sharing one L2 read of the main codebook (bulk-copy multicast); 1 = plain copies.
# Multicast of 2 measured faster for 8192-centroid codebooks with 8 warps (see NOTES) but was not the
# best variant overall; COMPRESS_VPTQ_CLUSTER selects it.
DEFAULT_CLUSTER = 1

_warned: list[bool] = []
_workspace = cuda_build.SplitKWorkspace()


def enabled() -> bool:
    return os.environ.get("COMPRESS_VPTQ_CUDA", "1") != "0"


def cluster_size() -> int:
    return int(os.environ.get("COMPRESS_VPTQ_CLUSTER", DEFAULT_CLUSTER))


def variant() -> str:
    name = os.environ.get("COMPRESS_VPTQ_VARIANT", DEFAULT_VARIANT)
    if name not in VARIANTS:
        raise CompressError(f"COMPRESS_VPTQ_VARIANT={name!r} is not one of {sorted(VARIANTS)}")
    return name


# The build helper lives in kernels/cuda_build.py (shared with the W4A16 GEMV); these names stay for
# kernels/vptq_probe.py.
_nvcc = cuda_build.nvcc
_arch = cuda_build.arch


def compile_variant(arch_code: str, name: str) -> Path:
    """Build (or find cached) variant `name` of VARIANTS for an architecture code such as "90a" (no GPU needed:
    bench/kernel_cache.py builds it on the CPU machine)."""
    warps, roll, bulk = VARIANTS[name]
    return cuda_build.compile_library(SRC, name, [f"-DVPTQ_WARPS={warps}", f"-DVPTQ_ROLL={roll}", f"-DVPTQ_BULK={bulk}"],
                                      arch_code, "vptq CUDA kernel", "using the Triton kernel")


def _compile(device: torch.device, name: str) -> Path:
    return compile_variant(_arch(device), name)


def prebuild(device: torch.device, names: list[str]) -> None:
    """Compile several variants at once (cuda_build.compile_parallel), for the probe; raises the first failure."""
    failed = cuda_build.compile_parallel([functools.partial(_compile, device, nm) for nm in names])
    if failed:
        raise failed[0][1]


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.vptq_gemv.restype = i
    so.vptq_gemv.argtypes = [p, i, p, p, i, i, p, p, i, i, i, p, p, p, p, p, i, i, i, i, i, i, i, i, i, i, p]
    so.vptq_gemv_workspace_floats.restype = ctypes.c_long
    so.vptq_gemv_workspace_floats.argtypes = [i, i, i]
    so.vptq_gemv_smem_bytes.restype = ctypes.c_long
    so.vptq_gemv_smem_bytes.argtypes = [i, i, i]


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device, name: str | None = None) -> ctypes.CDLL:
    """Compile (once per source/arch/variant, cached under ~/.cache/compress) and load the library."""
    name = name or variant()
    return _libraries.get(name, lambda: _compile(device, name))


def smem_limit(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    optin = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
    return optin or (227 * 1024 if props.major >= 9 else 0)


def smem_bytes(index_bits: int, res_bits: int, copies: int, warps: int) -> int:
    """Dynamic shared memory per CTA (mirrors vptq_smem in the .cu)."""
    return max(16 << index_bits, warps * 512 * 4) + (copies * 16 << res_bits if res_bits else 0)


def residual_copies(device: torch.device, index_bits: int, res_bits: int, warps: int) -> int | None:
    """8 replicas of the residual codebook (conflict-free reads) when shared memory allows, else 4."""
    for copies in (8, 4):
        if smem_bytes(index_bits, res_bits, copies, warps) <= smem_limit(device):
            return copies
    return None


def covers(x2: torch.Tensor, codebook: torch.Tensor, index_bits: int, res_codebook: torch.Tensor | None,
           res_index_bits: int | None, scale: torch.Tensor | None, bias: torch.Tensor | None, warps: int) -> bool:
    """The call shape both CUDA VPTQ kernels take (module docstring), before any build: batch 1 on a GPU,
    v = 8, the compiled index bits, fp16 contiguous codebooks (16-byte aligned) / scale / bias, and room in
    shared memory for the codebooks at `warps` warps per CTA."""
    if not enabled() or x2.device.type != "cuda" or x2.shape[0] != 1 or codebook.shape[1] != 8:
        return False
    rb = res_index_bits if res_codebook is not None else 0
    if index_bits not in MAIN_BITS or rb not in RES_BITS:
        return False
    if not operands_ok(codebook, res_codebook, scale, bias):
        return False
    return residual_copies(x2.device, index_bits, rb, warps) is not None


def operands_ok(codebook: torch.Tensor, res_codebook: torch.Tensor | None, scale: torch.Tensor | None,
                bias: torch.Tensor | None) -> bool:
    """What the CUDA VPTQ kernels (this GEMV and kernels/vptq_gemm_cuda.py) read as raw memory: fp16 contiguous
    codebooks, scale and bias, the codebooks 16-byte aligned (rows are copied as 16-byte vectors)."""
    tensors = [codebook] + [t for t in (res_codebook, scale, bias) if t is not None]
    if any(t.dtype != torch.float16 or not t.is_contiguous() for t in tensors):
        return False
    return not (codebook.data_ptr() % 16 or (res_codebook is not None and res_codebook.data_ptr() % 16))


def supports(x2: torch.Tensor, n: int, codebook: torch.Tensor, index_bits: int, res_codebook: torch.Tensor | None,
             res_index_bits: int | None, scale: torch.Tensor | None, bias: torch.Tensor | None) -> bool:
    """True when the CUDA kernel covers this call (see the module docstring)."""
    if not covers(x2, codebook, index_bits, res_codebook, res_index_bits, scale, bias, VARIANTS[variant()][0]):
        return False
    try:
        build(x2.device)
    except CompressError as e:  # no nvcc or a failed build: the Triton kernel serves, say why once
        if not _warned:
            warnings.warn(str(e), stacklevel=2)
            _warned.append(True)
        return False
    return True


def plan(n: int, k: int, sms: int, gt: int | None = None, cpt: int | None = None) -> tuple[int, int]:
    """(gt, cpt): vector slots per lane (tile = 32*gt slots) and CTAs per tile (split of K), from the
    cost model above: per tile, cpt CTAs share 32*gt*K vectors, and the tail grows with cpt."""
    ng = n // 8
    best = None
    for g in ([gt] if gt else [8, 4]):
        tiles = -(-ng // (32 * g))
        vt = 32 * g * k  # vectors per tile
        cap = max(1, sms // tiles)
        if cpt:
            cands = [cpt]
        else:
            c0 = math.sqrt(vt * NS_PER_VECTOR[g] * 1e-3 / US_PER_PARTIAL)
            cands = sorted({max(1, min(cap, int(c))) for c in (c0, c0 + 1, cap)})
        for c in cands:
            waves = -(-tiles * c // sms)
            est = waves * vt / c * NS_PER_VECTOR[g] * 1e-3 + US_PER_PARTIAL * c
            if best is None or est < best[0]:
                best = (est, g, c)
    return best[1], best[2]


@on_input_device
def gemv(x2: torch.Tensor, n: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
         res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
         scale: torch.Tensor | None, bias: torch.Tensor | None, out: torch.Tensor, gt: int | None = None,
         cpt: int | None = None, cluster: int | None = None, name: str | None = None, mode: int = 0,
         coop: bool = False) -> torch.Tensor:
    """out (1, n) = x2 (1, K) @ W_hat^T. Caller has checked shapes (vptq._check) and `supports`.
    gt / cpt / cluster / name override the plan and the build variant (for the probe); mode 1 and 2
    are timing probes that write no output. coop: cooperative launch, the split-K sum spread over every
    CTA of a tile instead of the last one to finish (no cluster multicast then)."""
    name = name or variant()
    lib = build(x2.device, name)
    k = indices.shape[0]
    sms = torch.cuda.get_device_properties(x2.device).multi_processor_count
    gt, cpt = plan(n, k, sms, gt, cpt)
    tiles = (n // 8 + 32 * gt - 1) // (32 * gt)
    ws, cnt = _workspace.get(x2.device, lib.vptq_gemv_workspace_floats(n, gt, cpt), 2 * tiles)
    has_res = res_codebook is not None
    rb = res_index_bits if has_res else 0
    copies = residual_copies(x2.device, index_bits, rb, VARIANTS[name][0]) or 4
    x2 = x2.contiguous()
    cl = cluster or cluster_size()
    rc = lib.vptq_gemv(
        x2.data_ptr(), int(x2.dtype == torch.bfloat16), indices.data_ptr(), codebook.data_ptr(), codebook.shape[0],
        index_bits, res_indices.data_ptr() if has_res else None, res_codebook.data_ptr() if has_res else None,
        res_codebook.shape[0] if has_res else 0, rb, copies, scale.data_ptr() if scale is not None else None,
        bias.data_ptr() if bias is not None else None, out.data_ptr(), ws.data_ptr(), cnt.data_ptr(), n, k,
        indices.shape[1], res_indices.shape[1] if has_res else 1, gt, cpt, 1 if coop else cl, VARIANTS[name][1], mode,
        int(coop), cuda_build.stream_handle(x2.device))
    if rc != 0:
        raise CompressError(f"vptq CUDA kernel: launch failed with code {rc} (n={n}, k={k}, bits={index_bits}/{rb}, "
                            f"gt={gt}, cpt={cpt}, cluster={cl}, variant={name})")
    return out
