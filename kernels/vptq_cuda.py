"""CUDA C++ VPTQ decode GEMV (kernels/csrc/vptq_gemv.cu): build with nvcc on first use, load through
ctypes, launch on torch's current stream.

Why not Triton: the GEMV is bound by random 16-byte codebook reads; Triton 3.6 puts them through L1
(one cache line per thread, about 32 SM clocks per warp-wide gather), while the CUDA kernel holds
both codebooks in shared memory (see the .cu header for the layout). Why ctypes and no torch
extension: the source has no torch headers, so nvcc builds it in about 10 s instead of a minute.

Covered: batch 1 (M = 1), vector length 8, fp16 codebooks, main index bits 12 or 13 (4096 / 8192
centroids), residual bits 0, 8 or 9 (none / 256 / 512), fp16 or bf16 x, fp16 scale / bias. Anything
else, or no nvcc, goes to the Triton kernel (`supports` says which). COMPRESS_VPTQ_CUDA=0 turns it off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
import warnings
from pathlib import Path

import torch

from compress.errors import CompressError

SRC = Path(__file__).resolve().parent / "csrc" / "vptq_gemv.cu"
MAIN_BITS = (12, 13)
RES_BITS = (0, 8, 9)
# Vector slots per CTA below which fewer CTAs than SMs run: each CTA loads the whole codebook
# (64-128 KB), so for small layers the codebook copies, not the weights, would dominate.
VECTORS_PER_CTA = 4096
# CTAs per cluster sharing one L2 read of the main codebook (bulk-copy multicast); 1 = plain copies.
CLUSTER = 1

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_failed: str | None = None
_ws: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
_warned: list[bool] = []
_keep: list[torch.Tensor] = []  # outgrown workspaces stay alive: CUDA graphs may still point at them


def enabled() -> bool:
    return os.environ.get("COMPRESS_VPTQ_CUDA", "1") != "0"


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def _arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    suffix = "a" if (major, minor) == (9, 0) else ""  # sm_90a: Hopper's own instruction set
    return f"{major}{minor}{suffix}"


def build(device: torch.device) -> ctypes.CDLL:
    """Compile (once per source/arch, cached under ~/.cache/compress) and load the shared library."""
    global _lib, _failed
    with _lock:
        if _lib is not None:
            return _lib
        if _failed is not None:
            raise CompressError(_failed)
        nvcc = _nvcc()
        if nvcc is None:
            _failed = "vptq CUDA kernel: nvcc not found (set CUDA_HOME); using the Triton kernel"
            raise CompressError(_failed)
        arch = _arch(device)
        key = hashlib.sha256(SRC.read_bytes() + arch.encode()).hexdigest()[:16]
        cache = Path(os.environ.get("COMPRESS_KERNEL_CACHE", Path.home() / ".cache" / "compress" / "kernels"))
        lib = cache / f"vptq_gemv_{key}.so"
        if not lib.exists():
            cache.mkdir(parents=True, exist_ok=True)
            tmp = lib.with_suffix(f".{os.getpid()}.tmp")
            cmd = [nvcc, "-O3", "-std=c++17", "-diag-suppress=177", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-shared", "-Xcompiler",
                   "-fPIC", "-o", str(tmp), str(SRC)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                _failed = f"vptq CUDA kernel: nvcc failed ({' '.join(cmd)}): {res.stderr.strip()[-2000:]}"
                raise CompressError(_failed)
            os.replace(tmp, lib)
        so = ctypes.CDLL(str(lib))
        so.vptq_gemv.restype = ctypes.c_int
        so.vptq_gemv.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_void_p]
        so.vptq_gemv_workspace_floats.restype = ctypes.c_long
        so.vptq_gemv_workspace_floats.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        so.vptq_gemv_smem_bytes.restype = ctypes.c_long
        so.vptq_gemv_smem_bytes.argtypes = [ctypes.c_int, ctypes.c_int]
        _lib = so
        return so


def _smem_limit(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    optin = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
    return optin or (227 * 1024 if props.major >= 9 else 0)


def supports(x2: torch.Tensor, n: int, codebook: torch.Tensor, index_bits: int, res_codebook: torch.Tensor | None,
             res_index_bits: int | None, scale: torch.Tensor | None, bias: torch.Tensor | None) -> bool:
    """True when the CUDA kernel covers this call (see the module docstring)."""
    if not enabled() or x2.device.type != "cuda" or x2.shape[0] != 1 or codebook.shape[1] != 8:
        return False
    rb = res_index_bits if res_codebook is not None else 0
    if index_bits not in MAIN_BITS or rb not in RES_BITS:
        return False
    tensors = [codebook] + [t for t in (res_codebook, scale, bias) if t is not None]
    if any(t.dtype != torch.float16 or not t.is_contiguous() for t in tensors):
        return False
    if codebook.data_ptr() % 16 or (res_codebook is not None and res_codebook.data_ptr() % 16):
        return False
    kr = res_codebook.shape[0] if res_codebook is not None else 0
    smem = codebook.shape[0] * 16 + kr * 128 + 16 * 512 * 4
    if smem > _smem_limit(x2.device):
        return False
    try:
        build(x2.device)
    except CompressError as e:  # no nvcc or a failed build: the Triton kernel serves, say why once
        if not _warned:
            warnings.warn(str(e), stacklevel=2)
            _warned.append(True)
        return False
    return True


def _workspace(device: torch.device, floats: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partials, int32 tile counters). Counters start at zero and the kernel leaves them so."""
    ws, cnt = _ws.get(device, (None, None))
    if ws is None or ws.numel() < floats or cnt.numel() < tiles:
        if ws is not None:
            _keep.extend((ws, cnt))
        ws = torch.empty(max(floats, 1 << 20), dtype=torch.float32, device=device)
        cnt = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
        _ws[device] = (ws, cnt)
    return ws, cnt


def plan(n: int, k: int, device: torch.device, gt: int | None = None, ctas: int | None = None) -> tuple[int, int]:
    """(gt, ctas): 8 vector slots per lane unless the layer has fewer than 256 slots (then 4); CTAs so
    that each handles at least VECTORS_PER_CTA vectors, at most one per SM."""
    ng = n // 8
    gt = gt or (8 if ng >= 256 else 4)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    ctas = ctas or max(1, min(sms, (ng * k + VECTORS_PER_CTA - 1) // VECTORS_PER_CTA))
    return gt, ctas


def gemv(x2: torch.Tensor, n: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
         res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
         scale: torch.Tensor | None, bias: torch.Tensor | None, out: torch.Tensor, gt: int | None = None,
         ctas: int | None = None, cluster: int | None = None) -> torch.Tensor:
    """out (1, n) = x2 (1, K) @ W_hat^T. Caller has checked shapes (vptq._check) and `supports`."""
    lib = build(x2.device)
    k = indices.shape[0]
    gt, ctas = plan(n, k, x2.device, gt, ctas)
    tiles = (n // 8 + 32 * gt - 1) // (32 * gt)
    ws, cnt = _workspace(x2.device, lib.vptq_gemv_workspace_floats(n, gt, ctas), tiles)
    has_res = res_codebook is not None
    x2 = x2.contiguous()
    rc = lib.vptq_gemv(
        x2.data_ptr(), int(x2.dtype == torch.bfloat16), indices.data_ptr(), codebook.data_ptr(), codebook.shape[0],
        index_bits, res_indices.data_ptr() if has_res else None, res_codebook.data_ptr() if has_res else None,
        res_codebook.shape[0] if has_res else 0, res_index_bits if has_res else 0,
        scale.data_ptr() if scale is not None else None, bias.data_ptr() if bias is not None else None, out.data_ptr(),
        ws.data_ptr(), cnt.data_ptr(), n, k, indices.shape[1], res_indices.shape[1] if has_res else 1, gt, ctas,
        cluster or CLUSTER, torch.cuda.current_stream(x2.device).cuda_stream)
    if rc != 0:
        raise CompressError(f"vptq CUDA kernel: launch failed with code {rc} (n={n}, k={k}, bits={index_bits}/"
                            f"{res_index_bits}, gt={gt}, ctas={ctas}, cluster={cluster or CLUSTER})")
    return out
