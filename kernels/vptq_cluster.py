"""VPTQ decode GEMV with split-K inside a thread-block cluster (kernels/csrc/vptq_gemv_cluster.cu).

Beside kernels/vptq_cuda.py (session 2's kernel: codebooks in shared memory, split-K through a
workspace and a counter tail). This one removes that kernel's fixed cost per call (~11-14 us before
the first weight on the H100, bench/results/h100/kernels_vptq/NOTES.md): the CTAs that split one tile's
K are one cluster and reduce through distributed shared memory; the main codebook comes by bulk copy,
multicast to the cluster; tiles go down to 64 outputs so small layers still fill the chip; and calls
where a CTA decodes few vectors can read the codebooks through L1 instead of copying them.

One library per (main, residual) index-bit pair, built with nvcc on first use (~7 s each; the .cu
header says what each build holds). Covered: M = 1, vector length 8, fp16 codebooks, 12/13-bit main,
0/8/9-bit residual indices, fp16 or bf16 x, fp16 scale / bias. kernels/vptq_select.py decides per layer
shape whether this kernel or the split-K one serves; `plan` is the cost model's launch (used when this
kernel is pinned with COMPRESS_VPTQ_KERNEL=cluster).
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, vptq_cuda
from kernels.op_dispatch import on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "vptq_gemv_cluster.cu"
# Tile shapes compiled (VPTQ_TILES in the .cu): (gt vector slots per lane, lt lanes per tile).
TILES = ((1, 8), (1, 16), (1, 32), (2, 16), (2, 32), (4, 32), (8, 32))
MAX_CLUSTER = 16
# Cost model behind `plan`, written before the kernel ran: only 0.24 ns (shared-memory path, gt = 8) is a
# session-2 measurement; the rest are estimates (narrower tiles load more index words per vector; through L1
# a codebook row is a cache-line lookup). The session-8 probe showed it picks poorly (e.g. 26 x 5-CTA clusters
# on 16384 x 53248: two waves, since clusters of 5 do not pack into GPCs), which is why kernels/vptq_select.py
# times the candidates instead; `plan` serves only when this kernel is pinned.
NS_PER_VECTOR_SMEM = {8: 0.24, 4: 0.26, 2: 0.30, 1: 0.40}
NS_PER_VECTOR_L1 = {8: 0.75, 4: 0.80, 2: 0.90, 1: 1.10}
US_COPY_PER_KB = 0.012       # bulk copy of the main codebook per CTA (multicast shares L2 reads)
US_CLUSTER_PER_CTA = 0.08    # the distributed-shared-memory reduction, per CTA of the cluster

_active: dict[tuple, int] = {}


def pdl_enabled() -> bool:
    """Programmatic dependent launch (the .cu's vptq_cluster_gemv says what overlaps); COMPRESS_VPTQ_PDL=0 turns
    it off."""
    return os.environ.get("COMPRESS_VPTQ_PDL", "1") != "0"


def compile_pair(arch_code: str, b: int, rb: int) -> Path:
    """The library for b-bit main and rb-bit residual indices (rb = 0: none), built for `arch_code`."""
    return cuda_build.compile_library(SRC, f"b{b}r{rb}", [f"-DVPTQ_B={b}", f"-DVPTQ_RB={rb}"], arch_code,
                                      "vptq cluster kernel", "using the split-K kernel")


# The (main, residual) index-bit pairs the seed-000 codebooks (4096 / 8192 main, 256 / 512 residual) and the synthetic
# e2e models (4096 / 256) use: what bench/kernel_cache.py builds ahead.
SEED_PAIRS = ((12, 8), (12, 9), (13, 8), (13, 9))


def compile_variant(arch_code: str, variant: str) -> Path:
    """`compile_pair` for a variant named as its library: "b12r8" = 12-bit main, 8-bit residual indices."""
    b, rb = variant.removeprefix("b").split("r")
    return compile_pair(arch_code, int(b), int(rb))


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.vptq_cluster_gemv.restype = i
    so.vptq_cluster_gemv.argtypes = [p, i, p, p, i, i, p, p, i, i, i, p, p, p, i, i, i, i, i, i, i, i, i, p]
    so.vptq_cluster_smem_bytes.restype = ctypes.c_long
    so.vptq_cluster_smem_bytes.argtypes = [i, i]
    so.vptq_cluster_max_active.restype = i
    so.vptq_cluster_max_active.argtypes = [i, i, i, i, i]


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device, b: int, rb: int) -> ctypes.CDLL:
    """Compile (once per source/arch/bits, cached under ~/.cache/compress) and load the library."""
    return _libraries.get((b, rb), lambda: compile_pair(cuda_build.arch(device), b, rb))


def prebuild(device: torch.device, pairs: list[tuple[int, int]]) -> None:
    """Compile several bit pairs at once (cuda_build.compile_parallel); raises the first failure."""
    failed = cuda_build.compile_parallel([functools.partial(build, device, *br) for br in pairs])
    if failed:
        raise failed[0][1]


@dataclass(frozen=True)
class Launch:
    """One launch: tile = lt lanes x gt slots (8*gt*lt outputs); cl CTAs per tile (the split of K, one
    cluster); smem: codebooks copied to shared memory (else read through L1)."""

    gt: int
    lt: int
    cl: int
    smem: bool

    def tiles(self, n: int) -> int:
        return -(-(n // 8) // (self.gt * self.lt))


def estimate_us(n: int, k: int, sms: int, launch: Launch, main_kb: float, resident_clusters: int | None = None) -> float:
    """The cost model's microseconds for one call (fixed costs the two paths share are left out)."""
    tiles = launch.tiles(n)
    per_wave = resident_clusters if resident_clusters else max(1, sms // launch.cl)
    waves = -(-tiles // per_wave)
    vectors = launch.gt * launch.lt * k / launch.cl  # per CTA
    ns = (NS_PER_VECTOR_SMEM if launch.smem else NS_PER_VECTOR_L1)[launch.gt]
    us = waves * vectors * ns * 1e-3
    if launch.smem:
        us += US_COPY_PER_KB * main_kb / max(1, min(launch.cl, 4)) + US_COPY_PER_KB * main_kb / 4
    return us + (US_CLUSTER_PER_CTA * launch.cl if launch.cl > 1 else 0.0)


def candidates(n: int, sms: int) -> list[Launch]:
    """Every launch worth timing for out_features n: each tile shape with the cluster sizes that fill
    one wave of `sms` CTAs (and half of it), codebooks in shared memory or through L1."""
    out = []
    for gt, lt in TILES:
        tiles = -(-(n // 8) // (gt * lt))
        if tiles > 2 * sms:
            continue
        cls = {max(1, min(MAX_CLUSTER, sms // tiles)), max(1, min(MAX_CLUSTER, sms // (2 * tiles)))}
        for cl in sorted(cls):
            for smem in (True, False):
                out.append(Launch(gt, lt, cl, smem))
    return out


def plan(n: int, k: int, sms: int, index_bits: int = 12) -> Launch:
    """The launch with the lowest `estimate_us` among `candidates`."""
    main_kb = (16 << index_bits) / 1024
    return min(candidates(n, sms), key=lambda c: estimate_us(n, k, sms, c, main_kb))


def supports(x2: torch.Tensor, codebook: torch.Tensor, index_bits: int, res_codebook: torch.Tensor | None,
             res_index_bits: int | None, scale: torch.Tensor | None, bias: torch.Tensor | None) -> bool:
    """True when this kernel covers the call (module docstring); builds its library."""
    if not vptq_cuda.covers(x2, codebook, index_bits, res_codebook, res_index_bits, scale, bias, 16):
        return False
    rb = res_index_bits if res_codebook is not None else 0
    try:
        build(x2.device, index_bits, rb)
    except CompressError:
        return False  # the split-K kernel (or Triton) serves; vptq_cuda.supports says why once
    return True


def residual_copies(device: torch.device, index_bits: int, res_bits: int) -> int | None:
    """8 replicas of the residual codebook in shared memory when they fit, else 4 (as vptq_cuda)."""
    return vptq_cuda.residual_copies(device, index_bits, res_bits, 16)


@on_input_device
def gemv(x2: torch.Tensor, n: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
         res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
         scale: torch.Tensor | None, bias: torch.Tensor | None, out: torch.Tensor,
         launch: Launch | None = None) -> torch.Tensor:
    """out (1, n) = x2 (1, K) @ W_hat^T. Caller has checked shapes (vptq._check) and `supports`.
    `launch` overrides the plan (for the probe and the tests)."""
    has_res = res_codebook is not None
    rb = res_index_bits if has_res else 0
    lib = build(x2.device, index_bits, rb)
    k = indices.shape[0]
    sms = torch.cuda.get_device_properties(x2.device).multi_processor_count
    launch = launch or plan(n, k, sms, index_bits)
    copies = residual_copies(x2.device, index_bits, rb) or 4
    if launch.cl > 1:
        key = (x2.device, index_bits, rb, launch)
        if key not in _active:
            _active[key] = lib.vptq_cluster_max_active(launch.gt, launch.lt, int(launch.smem), launch.cl, copies)
        if _active[key] <= 0:
            raise CompressError(f"vptq cluster kernel: clusters of {launch.cl} CTAs cannot run on this GPU ({launch})")
    x2 = x2.contiguous()
    rc = lib.vptq_cluster_gemv(
        x2.data_ptr(), int(x2.dtype == torch.bfloat16), indices.data_ptr(), codebook.data_ptr(), codebook.shape[0],
        index_bits, res_indices.data_ptr() if has_res else None, res_codebook.data_ptr() if has_res else None,
        res_codebook.shape[0] if has_res else 0, rb, copies, scale.data_ptr() if scale is not None else None,
        bias.data_ptr() if bias is not None else None, out.data_ptr(), n, k, indices.shape[1],
        res_indices.shape[1] if has_res else 1, launch.gt, launch.lt, launch.cl, int(launch.smem), int(pdl_enabled()),
        cuda_build.stream_handle(x2.device))
    if rc != 0:
        raise CompressError(f"vptq cluster kernel: launch failed with code {rc} (n={n}, k={k}, bits={index_bits}/{rb}, "
                            f"{launch})")
    return out
