"""The warp-specialized W4A16 GEMM for 2-16 tokens (kernels/w4a16_ws_gemm.py) against the plain-torch reference, its
launcher's errors, CUDA graphs and the runtime's path list."""

import ctypes
import shutil

import pytest
import torch

from compress.errors import CompressError
from kernels import w4a16_ws_gemm as wsm
from kernels.cases import int4_runtime_layer, make_int4
from kernels.w4a16 import w4a16_linear_ref

from tests.test_w4a16_cc import TOL, built_library, cuda_config_table, gpu, rel_err

# (N, K): fewer rows than a row group, K not a multiple of 128 (a partial last stage; with group 64 a block whose
# second group does not exist: K = 200 -> G = 4, K = 136 -> G = 3), one block, more row groups than CTAs, real shapes
# (K = 14336 holds x for up to 4 tokens beside the ring).
SHAPES = [(8, 256), (40, 200), (104, 136), (256, 128), (4096, 4096), (1024, 14336), (14336, 4096), (4096, 12288)]
TOKENS = [1, 2, 7, 8, 9, 16]  # one token tile and two, each full and not


# ----------------------------------------------------------------------------------------------------- CPU
def test_launcher_errors_name_the_value_and_the_fix():
    p = make_int4(64, 256, 128, True, torch.float16, "cpu")
    with pytest.raises(CompressError, match=r"M=17 tokens; this GEMM takes 1\.\.16, use kernels\.w4a16\.w4a16_linear"):
        wsm.w4a16_ws_gemm(torch.randn(17, 256).half(), p["qweight"], p["scales"])
    with pytest.raises(CompressError, match=r"needs CUDA tensors, got cpu"):
        wsm.w4a16_ws_gemm(torch.randn(4, 256).half(), p["qweight"], p["scales"])
    assert not wsm.supports(torch.randn(4, 256).half(), p["qweight"], p["scales"], None, 128)


def test_config_override_is_checked(monkeypatch):
    monkeypatch.setenv("COMPRESS_W4A16_WS_GEMM_CONFIG", "99")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_WS_GEMM_CONFIG='99' is not a config index 0\.\.11"):
        wsm.config_for(4096, 4096, 16)
    monkeypatch.setenv("COMPRESS_W4A16_WS_GEMM_CONFIG", "3")
    assert wsm.config_for(4096, 4096, 16) == 3
    monkeypatch.delenv("COMPRESS_W4A16_WS_GEMM_CONFIG")
    assert wsm.config_for(1024, 4096, 8, "NVIDIA H200") == 9  # measured there, bucket 8
    assert wsm.config_for(1024, 4096, 5, "NVIDIA H200") == 9  # 5 tokens: bucket 8
    assert wsm.config_for(1024, 4096, 2, "NVIDIA H200") == 1
    assert wsm.config_for(4096, 4096, 16, "NVIDIA H200") == wsm.DEFAULT_CONFIG  # the default was within 2% there
    assert wsm.config_for(1024, 4096, 8, "NVIDIA H100 80GB HBM3") == wsm.DEFAULT_CONFIG  # not measured there


def test_the_reduction_follows_the_gpu_table_and_the_switch(monkeypatch):
    """The k/v layers' splits of K measured faster on the workspace on the H200 (session 36); elsewhere, and on GPUs
    with no table, the cluster; COMPRESS_W4A16_WS_GEMM_CLUSTER=0 turns it off everywhere."""
    assert not wsm.cluster_for(1024, 4096, 16, "NVIDIA H200") and not wsm.cluster_for(1024, 4096, 9, "NVIDIA H200")
    assert wsm.cluster_for(1024, 4096, 8, "NVIDIA H200") and wsm.cluster_for(14336, 4096, 16, "NVIDIA H200")
    assert wsm.cluster_for(1024, 4096, 16, "NVIDIA H100 80GB HBM3")
    monkeypatch.setenv("COMPRESS_W4A16_WS_GEMM_CLUSTER", "0")
    assert not wsm.cluster_for(14336, 4096, 16, "NVIDIA H200")


def test_configs_match_the_cuda_table():
    assert cuda_config_table(wsm.SRC, 5) == wsm.CONFIGS


def test_k_splits_where_x_exceeds_the_budget_and_shared_memory_follows_the_chunk():
    """A config stages at most its budget of x (64 KB for config 0): 8 tokens at K = 4096 whole, 16 tokens in two
    chunks of 2048, 16 tokens at K = 14336 in 7; the shared memory the launcher needs follows the chunk."""
    assert wsm.split(8, 4096, 0) == (1, 4096)
    assert wsm.split(16, 4096, 0) == (2, 2048)
    assert wsm.split(16, 14336, 0) == (7, 2048)
    assert wsm.split(16, 4096, 10) == (1, 4096)  # a 160 KB budget: no split
    assert wsm.split(2, 200, 0) == (1, 256)
    one = wsm.shared_bytes(16, 4096, 0, 128, False, 0)
    assert 16 * (2048 * 2 + 32) < one < 16 * (2048 * 2 + 32) + 24 * 1024
    assert one == wsm.shared_bytes(16, 28672, 0, 128, False, 0) < wsm.shared_bytes(16, 4096, 10, 128, False, 0)
    assert wsm.shared_bytes(16, 4096, 0, 128, False, 2) < wsm.shared_bytes(16, 4096, 0, 128, False, 8)
    assert wsm.shared_bytes(16, 4096, 0, 128, True, 2) > wsm.shared_bytes(16, 4096, 0, 128, False, 2)  # zeros


def test_the_cluster_reduction_takes_2_to_8_chunks_and_two_receive_buffers(monkeypatch):
    """16 tokens at K = 4096 (2 chunks) and K = 14336 (7) add through a cluster; 28672 (14 chunks) and no split do not.
    The two receive buffers hold a slice of the M x RB sums per chunk: 2 x 2 x 256 floats for 16 tokens x 32 rows in 2."""
    assert wsm.clustered(16, 4096, 0, True) and wsm.clustered(16, 14336, 0, True)
    assert not wsm.clustered(16, 28672, 0, True) and not wsm.clustered(8, 4096, 0, True)
    assert not wsm.clustered(16, 4096, 0, False)
    assert wsm.shared_bytes(16, 4096, 0, 128, False, 2, True) - wsm.shared_bytes(16, 4096, 0, 128, False, 2) == 4096
    assert wsm.shared_bytes(16, 14336, 0, 128, False, 2, True) - wsm.shared_bytes(16, 14336, 0, 128, False, 2) == (
        2 * 7 * 76 * 4)  # 512 sums in 7 slices of 74, rounded up to 76
    assert wsm.shared_bytes(16, 28672, 0, 128, False, 2, True) == wsm.shared_bytes(16, 28672, 0, 128, False, 2)
    monkeypatch.setenv("COMPRESS_W4A16_WS_GEMM_CLUSTER", "0")
    assert not wsm.cluster_reduce()
    monkeypatch.delenv("COMPRESS_W4A16_WS_GEMM_CLUSTER")
    assert wsm.cluster_reduce()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_library_builds_for_hopper_here_and_is_packed_for_the_gpu_machines(tmp_path, monkeypatch):
    """Built on this CPU machine for sm_90a (as bench/kernel_cache.py packs it), the library loads, its config table is
    the launcher's, and the kernel cache packs it."""
    so = built_library(wsm, "w4wsm", "wsm", tmp_path, monkeypatch)
    # The entry point's checks return before any CUDA call (so they run here); the launcher maps each code to its line.
    wsm._bind(so)
    a = 1 << 12  # an aligned address that is never read: every call below is refused first
    calls = {-1: (a, a, a, 0, 16, 64, 256, 128, 99), -2: (a, a, a, 0, 16, 64, 256, 32, 0),
             -3: (a, a, a, 0, 16, 64, 252, 128, 0), -4: (a + 2, a, a, 0, 16, 64, 256, 128, 0),
             -6: (a, a, a, 0, 16, 60, 256, 128, 0), -7: (a, a, a, 0, 17, 64, 256, 128, 0)}
    for rc, (x, q, sc, z, m, n, k, g, c) in calls.items():
        assert so.w4wsm_gemm(x, 0, q, sc, z or None, a, None, None, m, n, k, g, c, 0, 0, None) == rc
        assert rc in wsm._RC
    got = (ctypes.c_int * 2)()
    for m, k, c in ((16, 4096, 0), (16, 14336, 0), (8, 4096, 0), (3, 28672, 8), (16, 4096, 10), (1, 200, 1)):
        assert so.w4wsm_split(m, k, c, got) == 0
        assert (got[0], got[1]) == (wsm.split(m, k, c)[0], 16 * wsm.CONFIGS[c][1])


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
def test_rows_not_a_multiple_of_8_and_x_over_shared_memory_are_refused_with_the_fix():
    p = make_int4(36, 256, 128, True, torch.float16, "cuda")
    x = torch.randn(4, 256, device="cuda").half()
    with pytest.raises(CompressError, match=r"out_features=36 is not a multiple of 8; use kernels.w4a16_cuda"):
        wsm.w4a16_ws_gemm(x, p["qweight"], p["scales"])
    assert not wsm.supports(x, p["qweight"], p["scales"], None, 128)
    p = make_int4(64, 16384, 128, True, torch.float16, "cuda")  # 16 tokens of x: 512 KB, without a split of K
    x = torch.randn(16, 16384, device="cuda").half()
    with pytest.raises(CompressError, match=r"code -5 \(a K chunk of x and two ring stages over the shared memory"):
        wsm._launch(x, p["qweight"], p["scales"], None, 128, config=10)
    assert not wsm.fits(16, 16384, 10, 128, False, x.device) and wsm.fits(16, 16384, 0, 128, False, x.device)


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs", [64, 128])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_every_config_matches_reference_and_repeats_its_bytes(dtype, gs, sym, n, k):
    """Every config and token count that fits, with and without programmatic dependent launch, on a full and a 3-CTA
    grid; where K splits in 2..8 chunks, the cluster reduction and the workspace give the same bytes."""
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k + gs)
    dev = torch.device("cuda")
    ran, clustered = set(), 0
    for m in TOKENS:
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k + m)).to(dtype)
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
        for c in range(len(wsm.CONFIGS)):
            if not wsm.fits(m, k, c, gs, not sym, dev, cluster=True):
                continue
            both = wsm.clustered(m, k, c, True) and wsm.fits(m, k, c, gs, not sym, dev, cluster=False)
            for pdl, grid in ((0, 0), (2, 0), (2, 3)):  # a grid of 3 CTAs: several row groups each, the ring wrapping
                out = wsm._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl, max_grid=grid,
                                  cluster=True)
                assert out.shape == (m, n) and out.dtype == dtype
                assert rel_err(out, want) < TOL[dtype], f"M {m} config {c} pdl {pdl} grid {grid}"
                again = wsm._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl, max_grid=grid,
                                    cluster=True)
                assert torch.equal(out, again)
                if both:
                    on_workspace = wsm._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl,
                                               max_grid=grid, cluster=False)
                    assert torch.equal(out, on_workspace), f"M {m} config {c} pdl {pdl} grid {grid}"
                    clustered += 1
                ran.add(m)
    assert ran == set(TOKENS)  # every token count on some configs (K split where x is over their budget)
    assert (clustered > 0) == (k >= 4096)  # the real shapes split K at 9-16 tokens, in 2..8 chunks on some configs


@gpu
@pytest.mark.parametrize("dtype,big", [(torch.float16, 30000.0), (torch.bfloat16, 1e6), (torch.float16, 1e-3)],
                         ids=["fp16-30000", "bf16-1e6", "fp16-tiny"])
def test_large_and_small_activations_neither_overflow_nor_lose_precision(dtype, big):
    """Huge entries in some tokens, tiny ones in others: fp16 x goes into the mma as it is (fp32 sums), bf16 x is
    staged as fp16 scaled per token and 128-block by a power of two."""
    n, k, m = 512, 1024, 5
    p = make_int4(n, k, 128, False, dtype, "cuda", seed=3)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    if big > 1:
        x[0, 7], x[3, 500] = big, -big / 2
    else:
        x = x * big
    x = x.to(dtype)
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
    out = wsm.w4a16_ws_gemm(x, p["qweight"], p["scales"], p["zeros"], 128)
    assert rel_err(out, want) < TOL[dtype]


@gpu
def test_cuda_graph_replay_and_leading_dims():
    n, k = 4096, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=9)
    x = torch.randn(2, 5, k, device="cuda").half()
    want = wsm.w4a16_ws_gemm(x, p["qweight"], p["scales"], None, 128)
    assert want.shape == (2, 5, n)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            got = wsm.w4a16_ws_gemm(x, p["qweight"], p["scales"], None, 128)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(got, want)


@gpu
def test_runtime_offers_the_path_at_2_to_16_tokens_only():
    from compress.runtime.paths import PathTable

    n, k = 1024, 4096
    mod = int4_runtime_layer(n, k, False, "cuda", seed=6)
    x = torch.randn(8, k, device="cuda").half()
    paths = dict(mod.kernel_paths(x))
    assert "cuda_ws_gemm" in paths
    for m in (1, 17):
        assert "cuda_ws_gemm" not in dict(mod.kernel_paths(torch.randn(m, k, device="cuda").half()))
    assert rel_err(paths["cuda_ws_gemm"](), mod.reference(x)) < TOL[torch.float16]
    table = PathTable()
    table.run(("t",), mod.kernel_paths(x), x.device)
    timed = table.timings[("t",)]
    assert "cuda_ws_gemm" in timed and "cuda_ws_gemm (failed)" not in timed and "cuda_ws_gemm (mismatch)" not in timed


@gpu
def test_a_bad_config_override_is_reported_not_swallowed(monkeypatch):
    """COMPRESS_W4A16_WS_GEMM_CONFIG out of range: the path is still offered, its launch fails with the one-line error,
    and the path table records that line (the other paths serve)."""
    from compress.runtime.paths import PathTable

    mod = int4_runtime_layer(1024, 4096, False, "cuda", seed=6)
    x = torch.randn(8, 4096, device="cuda").half()
    monkeypatch.setenv("COMPRESS_W4A16_WS_GEMM_CONFIG", "99")
    assert "cuda_ws_gemm" in dict(mod.kernel_paths(x))
    table = PathTable()
    table.run(("t",), mod.kernel_paths(x), x.device)
    assert "COMPRESS_W4A16_WS_GEMM_CONFIG='99' is not a config index 0..11" in table.timings[("t",)]["cuda_ws_gemm (failed)"]
