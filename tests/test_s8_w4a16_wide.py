"""Session 8: the CUDA C++ W4A16 GEMV (kernels/w4a16_cuda.py) at 17..64 tokens (4 / 8 token tiles, weights scaled
before the mma) and its two-row-tile builds (`ROW_TILES`: a warp owns 32 rows), against `w4a16_linear_ref`; their
plans and shared-memory budgets on the CPU, and the sm_90a build."""

import ctypes

import pytest
import torch

from compress.packing.int4 import padded_k
from kernels import w4a16, w4a16_cuda
from kernels.w4a16 import w4a16_linear_ref
from tests.test_w4a16_cuda import TOL, check_gemv_against_reference, gpu, layer, rel_err

WIDE = sorted(w4a16_cuda.ROW_TILES)
# (N, K): a partial CTA of two-tile warps (N = 40, 257: rows past N inside a 32-row warp), a half block of K
# (group 64 with a missing second group), Llama-3 shapes (split K over many CTAs, cluster and workspace).
SHAPES = [(40, 256), (257, 320), (1000, 2112), (1024, 4096), (4096, 4096), (4096, 14336)]
WIDE_M = (17, 24, 32, 33, 48, 64)  # 4 token tiles (17..32) and 8 (33..64), partial tiles included


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_wide_m_matches_reference_with_the_default_plan(dtype, gs, sym, n, k):
    check_gemv_against_reference(n, k, gs, sym, dtype, WIDE_M)


@gpu
@pytest.mark.parametrize("name", ["w8b2s3", "w16b2s2", *WIDE])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
@pytest.mark.parametrize("cluster", [False, True], ids=["workspace", "cluster"])
def test_every_variant_at_every_token_tile_count(name, gs, sym, cluster):
    """One- and two-row-tile builds at 1, 2, 4 and 8 token tiles, split K reduced through the workspace or a
    cluster, with no split too (waves 0.01), on a shape with a partial last CTA."""
    n, k = 1000, 4096
    p = layer(n, k, gs, sym, torch.float16, seed=7)
    ref_of = lambda x: w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)  # noqa: E731
    for m in (1, 9, 16, 20, 40, 64):
        x = torch.randn(m, k, device="cuda").half()
        for waves in (1.0, 0.01):
            out = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name, waves=waves,
                                     cluster=cluster)
            err = rel_err(out, ref_of(x))
            assert err < TOL[torch.float16], f"{name} M={m} waves {waves}: {err:.2e}"


@gpu
def test_wide_m_same_bytes_eager_and_in_a_graph():
    """Same inputs, same bytes: repeated calls, and replays of a captured graph with PDL (counters reset)."""
    n, k = 4096, 4096
    p = layer(n, k, 128, True, torch.float16, seed=3)
    x = torch.randn(48, k, device="cuda").half()
    call = lambda: w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=WIDE[0], waves=2.0)  # noqa: E731
    first = call()
    assert torch.equal(first, call())
    call()  # build and plan outside the capture
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            outs = [call() for _ in range(3)]
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(2):
        g.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(o, first) for o in outs)


@gpu
def test_wide_m_refuses_the_fused_transforms_and_balanced_schedule():
    n, k = 256, 512
    p = layer(n, k, 128, True, torch.float16, seed=1)
    gu = torch.randn(20, 2 * k, device="cuda").half()
    with pytest.raises(Exception, match="more than 16 tokens"):
        w4a16_cuda._launch(gu, p["qweight"], p["scales"], None, 128, name="w8b2s3", xform="silu_mul")
    x = torch.randn(20, k, device="cuda").half()
    out = w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, balanced=True)  # falls back to the split
    assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)) < TOL[torch.float16]


# ----------------------------------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("name", ["w8b2s3", "w16b2s2", *WIDE])
@pytest.mark.parametrize("m", [17, 32, 48, 64])
@pytest.mark.parametrize("gs,asym", [(128, False), (64, True)])
@pytest.mark.parametrize("n,k", [(1024, 4096), (4096, 4096), (14336, 4096), (4096, 14336), (8192, 28672),
                                 (28672, 8192), (33, 192)])
def test_wide_plan_covers_k_once_and_fits_shared_memory(name, m, gs, asym, n, k):
    kblocks = padded_k(k) // 128
    per, split = w4a16_cuda.plan(n, k, m, 132, name, 1.0, 1, group_size=gs, asym=asym)
    assert per * split >= kblocks and per * (split - 1) < kblocks
    assert per == 1 or per * 256 * m <= w4a16_cuda.STAGED_BYTES_WIDE
    assert w4a16_cuda.smem_bytes(per, m, name, gs, asym) <= w4a16_cuda.SMEM_BYTES
    assert w4a16_cuda.plan_balanced(n, k, m, 132, name) is None  # built for <= 16 tokens only


def test_row_tiles_and_default_buckets():
    for name in WIDE:
        assert w4a16_cuda.rows_per_cta(name) == 32 * w4a16_cuda.VARIANTS[name][0]
    assert w4a16_cuda.rows_per_cta("w8b2s3") == 128
    for m, bucket in ((17, 32), (32, 32), (33, 64), (64, 64)):
        name, waves, cluster, bal = w4a16_cuda.default_config(m, 100, 4096)
        assert (name, waves) == w4a16_cuda.DEFAULTS[bucket] and not bal


@pytest.mark.skipif(w4a16_cuda.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("w4a16_two_row_tiles")
def test_two_row_tile_build_compiles_for_the_h100(sm90_library):
    """A two-row-tile variant builds for sm_90a (no GPU needed) and reports its rows, variant, M limit and the
    same shared-memory layout as the planner."""
    name = WIDE[0]  # the variant tests/sm90_builds.py builds
    lib = ctypes.CDLL(str(sm90_library))
    assert f"_{name}_" in lib._name
    warps, blocks, slots = w4a16_cuda.VARIANTS[name]
    assert lib.w4a16_gemv_variant() == 20000 + warps * 100 + blocks * 10 + slots
    assert lib.w4a16_gemv_rows_per_cta() == w4a16_cuda.rows_per_cta(name)
    assert lib.w4a16_gemv_max_m() == w4a16_cuda.MAX_M
    lib.w4a16_gemv_smem_bytes.restype = ctypes.c_long
    for per, m, gs, asym in [(1, 1, 128, 0), (6, 64, 64, 1), (8, 16, 128, 1), (3, 33, 128, 0)]:
        assert lib.w4a16_gemv_smem_bytes(per, m, gs, asym) == w4a16_cuda.smem_bytes(per, m, name, gs, bool(asym))


# ------------------------------------------------------------------------------------- session-8 tables (CPU)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TRITON_TUNED = sorted({tuple(sorted(c.items())) for by in w4a16.SHAPE_TUNED.values() for c in by.values()})


@pytest.mark.parametrize("cfg", [dict(c) for c in TRITON_TUNED],
                         ids=[f"{dict(c)['BM']}x{dict(c)['BN']}x{dict(c)['NB']}x{dict(c)['num_stages']}"
                              f"{'f' + str(dict(c)['fill']) if 'fill' in dict(c) else 'w' + str(dict(c).get('waves', 2))}"
                              for c in TRITON_TUNED])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
def test_every_tuned_triton_config_matches_reference(cfg, gs, sym):
    """Each Triton tile config of SHAPE_TUNED (CPU: the interpreter) at an M of its bucket, partial tiles included."""
    m = {16: 9, 32: 20, 64: 40, 128: 100}[cfg["BM"]]
    p = layer(160, 640, gs, sym, torch.float16, device=DEVICE, seed=cfg["BM"])
    x = torch.randn(m, 640, device=DEVICE).half()
    out = w4a16._launch(x, p["qweight"], p["scales"], p["zeros"], gs, cfg)
    assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)) < TOL[torch.float16]


def test_shape_tables_pick_by_bucket_and_fall_back():
    for (n, k), by in w4a16.SHAPE_TUNED.items():
        for bucket, cfg in by.items():
            lo = {16: 2, 32: 17, 64: 33, 256: 65}[bucket]
            for m in (lo, bucket):  # launched as TILE_LAUNCH says from TILE_LAUNCH_MIN_M tokens (session 13)
                assert w4a16._config(m, n, k) == (cfg | w4a16.TILE_LAUNCH if m >= w4a16.TILE_LAUNCH_MIN_M else cfg)
            assert 16 <= cfg["BM"] <= bucket and bucket % cfg["BM"] == 0  # one M tile, or two at 64 tokens (k / v)
    assert w4a16._config(40, 100, 4096) == w4a16._config(40, 100)  # a shape no table lists: the M table
    assert w4a16._config(1, 1024, 4096) == w4a16._config(1, 1024)  # M = 1 is not per shape
    for (n, k), by in w4a16_cuda.TUNED.items():
        for bucket, (name, waves, cluster) in by.items():
            assert bucket in w4a16_cuda.DEFAULTS and name in w4a16_cuda.VARIANTS and waves > 0
            if bucket > 16:
                assert w4a16_cuda.default_config(bucket, n, k) == (name, waves, cluster, False)
