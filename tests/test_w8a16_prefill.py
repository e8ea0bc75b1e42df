"""The tiled W8A16 GEMM for many rows (compress/runtime/w8a16_prefill.py): its math against the torch
reference and the dequantize + cuBLAS path, the shapes and group sizes it takes, the layer offering it, and its
build for sm_90 without a GPU. Triton runs in its CPU interpreter here (compiled on a GPU); small shapes keep it
fast. The GPU test runs Llama-3-8B layer shapes."""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.runtime.spec import LayerSpec
from tests.conftest import needs_triton, triton_interpreter_works  # noqa: F401 (the skip condition names it)

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _layer(n: int, k: int, group_size: int, gen: torch.Generator, dtype=torch.float16):
    q = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int8).to(DEV)
    s = (torch.rand(n, k // group_size, generator=gen) * 0.01 + 1e-3).to(dtype).to(DEV)
    return q, s


@needs_triton
@pytest.mark.parametrize("n,k,gs", [(40, 256, 32), (33, 256, 128), (70, 200, 200), (24, 96, 16)])
def test_tiled_gemm_matches_the_dequantized_temporary_times_x(n, k, gs):
    """N, M not multiples of any tile; per-row scales on K = 200 (masked column tail); groups of 16..128."""
    from compress.runtime.decode_kernels import dequant_w8
    from compress.runtime.w8a16_prefill import TILED_W8_CONFIGS, gemm_w8_tiled, gemm_w8_tiled_ref

    g = torch.Generator().manual_seed(n * k)
    q, s = _layer(n, k, gs, g)
    w = dequant_w8(q, s, None, torch.float16)  # the dequantize path's temporary
    for m in (17, 70):
        x = torch.randn(m, k, generator=g).half().to(DEV)
        ref = gemm_w8_tiled_ref(x, q, s, gs)
        assert _rel(ref, (x.float() @ w.float().t()).half()) < 1e-3  # the reference is that path's math
        for cfg in TILED_W8_CONFIGS[:1] + ((32, 32, 32, 4, 2), (16, 64, 64, 4, 2)):
            y = gemm_w8_tiled(x, q, s, gs, cfg)
            assert y.dtype == torch.float16 and y.shape == (m, n)
            assert _rel(y, ref) < 2e-3, (m, cfg, _rel(y, ref))


@needs_triton
def test_tiled_gemm_reads_x_through_its_row_stride():
    """x may be a view with a row stride larger than K (a slice of a wider activation)."""
    from compress.runtime.w8a16_prefill import gemm_w8_tiled, gemm_w8_tiled_ref

    g = torch.Generator().manual_seed(3)
    q, s = _layer(48, 128, 64, g)
    wide = torch.randn(20, 200, generator=g).half().to(DEV)
    x = wide[:, 40:168]
    assert x.stride(0) == 200
    assert _rel(gemm_w8_tiled(x, q, s, 64, (32, 32, 32, 4, 2)), gemm_w8_tiled_ref(x.contiguous(), q, s, 64)) < 2e-3


@needs_triton
def test_tiled_gemm_in_several_groups_of_row_tiles(monkeypatch):
    """x larger than the L2 budget: programs run in groups of row tiles (here 2, 2 and a last group of 1)."""
    from compress.runtime import w8a16_prefill as wp

    g = torch.Generator().manual_seed(4)
    q, s = _layer(40, 64, 32, g)
    x = torch.randn(70, 64, generator=g).half().to(DEV)
    monkeypatch.setattr(wp, "X_L2_BYTES", 2 * 16 * 64 * 2)  # two row tiles of 16 rows
    assert _rel(wp.gemm_w8_tiled(x, q, s, 32, (16, 16, 32, 4, 2)), wp.gemm_w8_tiled_ref(x, q, s, 32)) < 2e-3


def test_supported_shapes():
    from compress.runtime.w8a16_prefill import tiled_w8_supported

    assert tiled_w8_supported(4096, 128) and tiled_w8_supported(4096, 4096) and tiled_w8_supported(200, 200)
    assert not tiled_w8_supported(300, 100)  # groups not a power of two
    assert not tiled_w8_supported(4096, 8)  # groups narrower than one tensor-core step
    assert not tiled_w8_supported(200, 128)  # a partial last group


def _kernel_layer(spec: LayerSpec, tensors: dict):
    from compress.runtime import kernel_bridge as kb
    from compress.runtime.formats_ct import CTW8A16Linear

    mod = CTW8A16Linear.from_checkpoint(spec, tensors, device=torch.device(DEV), dtype=torch.float16)
    with kb.allow_interpreter():
        mod.use_kernel()
    return mod


@needs_triton
def test_which_w8a16_layers_get_the_tiled_gemm():
    """Per-row scales on a width that is not a multiple of 64: offered from 17 rows, after dequantize + cuBLAS above
    64 rows (what an unmeasured shape runs under graph capture), and computing the reference. Zero points: never
    (the few-row and the other kernels of the format are symmetric too). (Group-128 layers: test_glue_kernels.)"""
    g = torch.Generator().manual_seed(21)
    n, k = 40, 192
    per_row = _kernel_layer(LayerSpec("l", "compressed-tensors.w8a16", k, n, args={"strategy": "channel"}),
                            {"weight": torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8),
                             "weight_scale": torch.rand(n, 1, generator=g).half() * 0.01})
    for m in (16, 17, 100):
        x = torch.randn(m, k, generator=g).half().to(DEV)
        paths = per_row.kernel_paths(x)
        tiled = [(p, fn) for p, fn in paths if p.startswith("gemm_w8_tiled")]
        assert bool(tiled) == (m >= 17), (m, [p for p, _ in paths])
        assert m <= 64 or paths[0][0] == "dequant+cublas"
        ref = per_row.reference(x)
        for name, fn in tiled:
            assert _rel(fn(), ref) < 4e-3, (m, name)
    asym = _kernel_layer(LayerSpec("l", "compressed-tensors.w8a16", 128, 16,
                                   args={"group_size": 64, "strategy": "group", "symmetric": False}),
                         {"weight": torch.randint(-128, 128, (16, 128), generator=g, dtype=torch.int8),
                          "weight_scale": torch.rand(16, 2, generator=g).half() * 0.01,
                          "weight_zero_point": torch.randint(-4, 4, (16, 2), generator=g, dtype=torch.int8)})
    assert [p for p, _ in asym.kernel_paths(torch.randn(80, 128).half().to(DEV))] == ["dequant+cublas"]


_AOT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from compress.runtime.w8a16_prefill import TILED_W8_CONFIGS, _gemm_w8_tiled

n = 0
for dt, configs in (("*fp16", TILED_W8_CONFIGS), ("*bf16", TILED_W8_CONFIGS[:1])):
    for bn, bm, bk, warps, stages in configs:
        types = dict(x_ptr=dt, q_ptr="*i8", s_ptr=dt, y_ptr=dt, M="i32", N="i32", G="i32", stride_xm="i32", GROUP_M="i32",
                     stride_ym="i32")
        consts = dict(K=4096, GS=128, BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk, DOT_F32=False)
        fn = _gemm_w8_tiled
        sig = {a: "constexpr" if a in consts else types[a] for a in fn.arg_names}
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(c),): v for c, v in consts.items()})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
        assert "wgmma" in k.asm["ptx"], (dt, bn, bm)  # Hopper's warpgroup MMA, not the older mma.sync
        n += 1
print("compiled", n)
"""


def test_tiled_gemm_compiles_for_the_h100():
    """The CPU interpreter accepts code the GPU compiler rejects: compile every tiling for sm_90 here (fp16; bf16 one
    tiling), without a GPU, and check it uses the warpgroup tensor-core instructions."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    from compress.runtime.w8a16_prefill import TILED_W8_CONFIGS

    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", _AOT], capture_output=True, text=True, env=env, timeout=300)
    if "ptxas" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("this Triton install has no ptxas")
    assert r.returncode == 0 and f"compiled {len(TILED_W8_CONFIGS) + 1}" in r.stdout, r.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiled_gemm_on_llama_3_8b_shapes(dtype):
    from compress.runtime.w8a16_prefill import TILED_W8_CONFIGS, gemm_w8_tiled, gemm_w8_tiled_ref

    g = torch.Generator().manual_seed(8)
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)):
        q, s = _layer(n, k, 128, g, dtype)
        for m in (65, 256, 2048):
            x = torch.randn(m, k, generator=g).to(dtype).to(DEV)
            ref = gemm_w8_tiled_ref(x, q, s, 128)
            for cfg in TILED_W8_CONFIGS:
                assert _rel(gemm_w8_tiled(x, q, s, 128, cfg), ref) < 5e-3, (n, k, m, cfg)
