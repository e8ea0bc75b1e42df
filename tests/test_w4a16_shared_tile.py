"""The W4A16 CUDA GEMV built with warps sharing one row tile (kernels/w4a16_cuda.py SHARED_TILE, -DW4_KS; session 25):
every path of its epilogue (one K chunk, split K through the workspace, split K inside a cluster) against the
reference, for 1..64 tokens; the same bytes on every call, through the cluster and the workspace, and in CUDA-graph
replays; its plan and its sm_90a build on the CPU."""

import ctypes

import pytest
import torch

from compress.packing.int4 import padded_k
from kernels import w4a16_cuda
from kernels.cases import make_int4, rel_err  # inf where the output holds a NaN or inf
from kernels.w4a16 import w4a16_linear_ref

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
SHARED = sorted(w4a16_cuda.SHARED_TILE)


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("name", SHARED)
@pytest.mark.parametrize("dtype,gs,sym", [(torch.float16, 128, True), (torch.bfloat16, 64, False)],
                         ids=["fp16-g128-sym", "bf16-g64-asym"])
@pytest.mark.parametrize("n,k", [(257, 320), (1000, 2112), (4096, 14336)])
def test_shared_tile_builds_match_reference_on_every_epilogue(name, dtype, gs, sym, n, k):
    """Odd N (a partial tile), K = 64 x odd (a half block: some warps of a tile get no slot), a real 8B shape; one
    K chunk (waves 0.01: the tile's sums go straight to y), split K through the workspace and inside a cluster."""
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k + gs)
    for m in (1, 5, 9, 16, 17, 40, 64):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
        for waves, cluster in ((0.01, False), (1.0, False), (2.0, True)):
            out = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name, waves=waves,
                                     cluster=cluster, min_blocks=64 if waves < 0.1 else None)
            assert rel_err(out, want) < TOL[dtype], (m, waves, cluster)


@gpu
@pytest.mark.parametrize("name", ["w8b2s3k4", "w16b2s2k8"])
@pytest.mark.parametrize("m", [1, 16])
def test_shared_tile_same_bytes_cluster_workspace_and_graph(name, m):
    """The tile's warps add their sums in warp order, then the K chunks in split order: repeated calls, the cluster
    reduction and the workspace (same chunks) and CUDA-graph replays with PDL give identical bytes."""
    n, k = 1024, 4096  # 32 CTAs of 32 rows: the plan splits K
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=11)
    x = torch.randn(m, k, device="cuda").half()
    got = w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=name, waves=1.0, cluster=True)
    per, split, _ = w4a16_cuda.plan_for(x.device, w4a16_cuda.build(x.device, name), name, n, k, m, 128, False, False,
                                        1.0, None, True)
    assert split > 1
    ws = w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=name, waves=1.0, cluster=False, min_blocks=per)
    assert torch.equal(got, ws)
    assert torch.equal(got, w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=name, waves=1.0,
                                               cluster=True))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=name, waves=1.0, cluster=False,
                                   min_blocks=per, pdl=2) for _ in range(3)]
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(o, ws) for o in outs)


@gpu
def test_shared_tile_asks_for_no_balanced_schedule():
    """Asked for the balanced schedule, a shared-tile build plans the per-row-group split (its kernel is not built
    with the balanced schedule) and still gives the reference."""
    n, k = 4096, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=12)
    x = torch.randn(2, k, device="cuda").half()
    _, _, bal = w4a16_cuda.plan_for(x.device, w4a16_cuda.build(x.device, "w8b2s3k4"), "w8b2s3k4", n, k, 2, 128,
                                    False, False, 1.0, None, False, True)
    assert not bal
    out = w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name="w8b2s3k4", balanced=True)
    assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)) < TOL[torch.float16]


# ----------------------------------------------------------------------------------------------------- CPU
def test_shared_tile_rows_and_plans():
    """A CTA of a shared-tile build owns warps / KS row tiles; the split-K plan covers K once and fits shared memory;
    the balanced plan does not apply."""
    for name, ks in w4a16_cuda.SHARED_TILE.items():
        warps, _, _ = w4a16_cuda.VARIANTS[name]
        assert warps % ks == 0 and w4a16_cuda.rows_per_cta(name) == 16 * warps // ks
        assert w4a16_cuda.plan_balanced(4096, 4096, 1, 132, name) is None
        for n, k, m in [(4096, 14336, 1), (28672, 8192, 16), (1024, 4096, 64), (257, 320, 3)]:
            per, split = w4a16_cuda.plan(n, k, m, 132, name, 1.0, 2)
            kblocks = padded_k(k) // 128
            assert per * split >= kblocks and per * (split - 1) < kblocks
            assert w4a16_cuda.smem_bytes(per, m, name) <= w4a16_cuda.SMEM_BYTES


@pytest.mark.skipif(w4a16_cuda.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("w4a16_shared_tile")
def test_shared_tile_source_compiles_for_the_h100(sm90_library):
    """The four-warps-a-tile build compiles for sm_90a and answers with its own variant code, rows and shared memory."""
    lib = ctypes.CDLL(str(sm90_library))
    warps, blocks, slots = w4a16_cuda.VARIANTS["w8b2s3k4"]
    assert lib.w4a16_gemv_variant() == 4 * 100000 + warps * 100 + blocks * 10 + slots
    assert lib.w4a16_gemv_rows_per_cta() == w4a16_cuda.rows_per_cta("w8b2s3k4") == 32
    lib.w4a16_gemv_smem_bytes.restype = ctypes.c_long
    for per, m, gs, asym in [(1, 1, 128, 0), (13, 3, 64, 1), (112, 1, 64, 0)]:
        assert lib.w4a16_gemv_smem_bytes(per, m, gs, asym) == w4a16_cuda.smem_bytes(per, m, "w8b2s3k4", gs, bool(asym))
