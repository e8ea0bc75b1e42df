"""Shapes and random layer builders shared by the kernel tests and `compress bench kernels`.

Tests and the benchmark import the same shape lists and the same builders, so what is timed is what
is checked.
"""

from __future__ import annotations

import math

import torch

from compress.packing.int4 import pack_int4, quantize_int4
from compress.packing.sparse24 import pack_sparse24

# (layer, out_features N, in_features K) of Llama-3-8B and Llama-3-70B linear layers.
LLAMA_SHAPES: list[tuple[str, int, int]] = [
    ("8B q/o_proj", 4096, 4096),
    ("8B k/v_proj", 1024, 4096),
    ("8B gate/up_proj", 14336, 4096),
    ("8B down_proj", 4096, 14336),
    ("70B q/o_proj", 8192, 8192),
    ("70B k/v_proj", 1024, 8192),
    ("70B gate/up_proj", 28672, 8192),
    ("70B down_proj", 8192, 28672),
]
BENCH_M: list[int] = [1, 2, 4, 8, 16, 32, 64, 256, 1024]

# Seed-000 VPTQ sweep, in the seed's row order (residual, then main codebook, then out, then in).
VPTQ_IN = [1024, 2048, 4096, 8192, 16384]
VPTQ_OUT = [1024, 4096, 8192, 14336, 28672, 53248]
VPTQ_MAIN = [4096, 8192]
VPTQ_RES = [256, 512]


def vptq_seed_rows() -> list[tuple[int, int, int, int]]:
    """(in_features, out_features, main_centroids, residual_centroids) x 120, seed-000 order."""
    return [(k, n, c, r) for r in VPTQ_RES for c in VPTQ_MAIN for n in VPTQ_OUT for k in VPTQ_IN]


# Small and odd shapes for CPU interpreter tests: (M, N, K).
TEST_SHAPES_INT4 = [(1, 48, 256), (3, 40, 200), (5, 64, 384), (20, 33, 128), (2, 16, 130)]
TEST_SHAPES_W8A8 = [(1, 48, 256), (3, 40, 208), (5, 64, 384), (20, 33, 128), (70, 16, 160)]
TEST_SHAPES_SPARSE = [(1, 48, 256), (2, 40, 36), (5, 64, 128), (20, 33, 96)]
# (M, N, K, main, residual, outlier columns)
TEST_CASES_VPTQ = [(1, 64, 48, 4096, 256, 0), (2, 40, 33, 8192, 512, 0), (1, 128, 20, 65536, 0, 0),
                   (5, 64, 24, 4096, 256, 0), (1, 64, 40, 4096, 256, 3), (6, 64, 40, 4096, 256, 3)]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp32; inf where a holds a NaN or inf (a kernel that left its output unwritten, when the
    caller poisoned it first)."""
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("inf")
    return float(((a - b).norm() / b.norm()).item())


def generator(device: torch.device | str, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def random_weight(n: int, k: int, device, seed: int) -> torch.Tensor:
    return torch.randn(n, k, generator=generator(device, seed), device=device) / math.sqrt(k)


def make_int4(n: int, k: int, group_size: int, symmetric: bool, dtype: torch.dtype, device, seed: int = 0) -> dict:
    """{"qweight", "scales", "zeros"(None if symmetric)} in compress.int4 layout from a random weight."""
    q = quantize_int4(random_weight(n, k, device, seed).to(dtype), group_size, symmetric)
    return {"qweight": pack_int4(q["u"]), "scales": q["scales"], "zeros": q.get("zeros")}


def int4_runtime_layer(n: int, k: int, symmetric: bool, device, seed: int = 0, group_size: int = 128):
    """compress.runtime's Int4Linear (fp16, no bias) on its kernel backend over a `make_int4` layer: what the runtime's
    path choice (`kernel_paths`, PathTable) is tested on."""
    from compress.runtime.formats_compress import Int4Linear
    from compress.runtime.spec import LayerSpec

    p = make_int4(n, k, group_size, symmetric, torch.float16, device, seed=seed)
    spec = LayerSpec(name="l", format="compress.int4", in_features=k, out_features=n)
    mod = Int4Linear(spec, torch.float16, p["qweight"], p["scales"], p["zeros"], group_size)
    mod.register_buffer("bias", None)
    mod.use_kernel()
    return mod


def make_w8a8(n: int, k: int, device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    from kernels.w8a8 import quantize_weight_per_channel

    return quantize_weight_per_channel(random_weight(n, k, device, seed))


def prune_24(w: torch.Tensor) -> torch.Tensor:
    """Keep the 2 largest-magnitude entries of every group of 4 along K."""
    n, k = w.shape
    groups = w.reshape(n, k // 4, 4)
    keep = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, groups.abs().topk(2, dim=-1).indices, True)
    return torch.where(keep, groups, torch.zeros((), dtype=w.dtype, device=w.device)).reshape(n, k)


def make_sparse24(n: int, k: int, dtype: torch.dtype, device, seed: int = 0) -> dict:
    """fp16/bf16: {"values", "meta"}; int8: {"values", "meta", "w_scale"} (per-channel symmetric)."""
    w = prune_24(random_weight(n, k, device, seed))
    if dtype == torch.int8:
        s = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        wq = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
        return {**pack_sparse24(wq), "w_scale": s}
    return pack_sparse24(w.to(dtype))


def pack_bits(idx: torch.Tensor, bits: int) -> torch.Tensor:
    """(R, G) indices -> (R, ceil(G*bits/32)) int32 little-endian bit stream (the compress.vptq contract)."""
    rows, g = idx.shape
    words = (g * bits + 31) // 32
    bit = torch.arange(g, device=idx.device, dtype=torch.int64) * bits
    word, shift = bit // 32, bit % 32
    out = torch.zeros(rows, words + 1, dtype=torch.int64, device=idx.device)
    idx = idx.to(torch.int64)
    out.index_add_(1, word, (idx << shift) & 0xFFFFFFFF)
    out.index_add_(1, word + 1, idx >> (32 - shift))  # spill into the next word (0 when none)
    out = out[:, :words]
    return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)


def make_vptq(n: int, k: int, main: int, res: int, device, seed: int = 0, v: int = 8, scale: bool = True,
              bias: bool = True, outliers: int = 0) -> dict:
    """Random compress.vptq layer as vptq_linear keyword arguments (indices uniform over the codebooks)."""
    gen = generator(device, seed)
    ng = n // v
    b = max(1, (main - 1).bit_length())
    d = {
        "indices": pack_bits(torch.randint(0, main, (k, ng), generator=gen, device=device), b),
        "codebook": (torch.randn(main, v, generator=gen, device=device) / math.sqrt(k)).half(),
        "index_bits": b,
    }
    if res:
        rb = max(1, (res - 1).bit_length())
        d.update(res_indices=pack_bits(torch.randint(0, res, (k, ng), generator=gen, device=device), rb),
                 res_codebook=(0.1 * torch.randn(res, v, generator=gen, device=device) / math.sqrt(k)).half(),
                 res_index_bits=rb)
    if scale:
        d["scale"] = (torch.rand(n, generator=gen, device=device) + 0.5).half()
    if bias:
        d["bias"] = (0.01 * torch.randn(n, generator=gen, device=device)).half()
    if outliers:
        cols = torch.randperm(k, generator=gen, device=device)[:outliers].sort().values.to(torch.int32)
        d.update(outlier_cols=cols, outlier_codebook=(torch.randn(64, v, generator=gen, device=device) / math.sqrt(k)).half(),
                 outlier_indices=pack_bits(torch.randint(0, 64, (outliers, ng), generator=gen, device=device), 6),
                 outlier_index_bits=6)
    return d
