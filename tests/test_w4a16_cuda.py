"""The CUDA C++ W4A16 GEMV (kernels/w4a16_cuda.py) against the plain-torch reference, its launcher's errors,
its split-K plan, its build, and its place among the runtime's int4 paths."""

import pytest
import torch

from compress.errors import CompressError
from compress.packing.int4 import padded_k
from kernels import w4a16_cuda
from kernels.cases import int4_runtime_layer, make_int4
from kernels.w4a16 import w4a16_linear_ref

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (N, K): odd N (partial CTAs and partial warps), K = 64 * odd (a half block; group 64 then has a missing
# second group in the last block), a one-block K, real Llama-3 shapes (split K over many CTAs).
SHAPES = [(40, 256), (33, 192), (100, 64), (257, 320), (4096, 4096), (1024, 14336), (14336, 4096)]


def rel_err(a, b):
    assert torch.isfinite(a).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def layer(n, k, gs, sym, dtype, device="cuda", seed=0):
    return make_int4(n, k, gs, sym, dtype, device, seed=seed)


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs", [64, 128])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_gemv_matches_reference(dtype, gs, sym, n, k):
    check_gemv_against_reference(n, k, gs, sym, dtype, (1, 3, 8, 9, 16))  # one token tile (M <= 8), two (M = 9..16)


def check_gemv_against_reference(n: int, k: int, gs: int, sym: bool, dtype: torch.dtype, ms) -> None:
    """The CUDA GEMV with its default plan against the reference on a random (n, k) layer, for each M in `ms`."""
    p = layer(n, k, gs, sym, dtype, seed=n + k + gs)
    for m in ms:
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        out = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], gs)
        assert out.shape == (m, n) and out.dtype == dtype
        err = rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs))
        assert err < TOL[dtype], f"M={m}: rel err {err:.2e}"


@gpu
@pytest.mark.parametrize("name", sorted(w4a16_cuda.VARIANTS))
def test_every_build_variant_matches_reference(name):
    n, k = 1000, 2112  # K = 64 * 33
    for gs, sym in ((64, False), (128, True), (128, False)):
        p = layer(n, k, gs, sym, torch.float16, seed=5)
        for m in (1, 2, 5, 8, 12, 16):
            x = torch.randn(m, k, device="cuda").half()
            out = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name)
            err = rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs))
            assert err < TOL[torch.float16], f"group {gs}, sym {sym}, M={m}: rel err {err:.2e}"


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
def test_outlier_channels_small_tokens_and_zero_tokens(dtype, sym):
    """Per token, against the reference, at one and two token tiles: activations with outlier channels (x 300, as LLM
    activations have), a token of small activations (x 1e-3, partly below fp16's normal range) and a token of zeros
    (exactly zero out). Session 37 measured a variant that fed the mma "1024 + u" and subtracted the offset from fp32
    sums (branch s37-offset-dequant): ten times the error of this kernel on random activations, and slower."""
    n, k = 4096, 4096
    p = layer(n, k, 128, sym, dtype, seed=11)
    g = torch.Generator("cuda").manual_seed(3)
    for m in (1, 7, 9, 16):
        x = torch.randn(m, k, device="cuda", generator=g)
        x[:, ::397] *= 300
        x[m // 2] *= 1e-3
        if m > 1:
            x[m - 1] = 0
        x = x.to(dtype)
        out = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], 128)
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
        for i in range(m - (m > 1)):
            err = rel_err(out[i], want[i])
            assert err < TOL[dtype], f"M={m}, token {i}: rel err {err:.2e}"
        if m > 1:
            assert torch.equal(out[m - 1], torch.zeros_like(out[m - 1]))


@gpu
@pytest.mark.parametrize("waves,min_blocks", [(0.01, 64), (1.0, 1), (8.0, 1)])
def test_split_plans_agree(waves, min_blocks):
    """No split (one CTA per row group), a few chunks and one block per chunk give the reference's output."""
    n, k = 520, 4096
    p = layer(n, k, 128, True, torch.bfloat16, seed=2)
    x = torch.randn(4, k, device="cuda").bfloat16()
    out = w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, waves=waves, min_blocks=min_blocks)
    assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)) < TOL[torch.bfloat16]


@gpu
def test_same_inputs_same_bytes_and_graph_replay():
    """Split-K sums in a fixed order (no float atomics): repeated calls, and CUDA-graph replays (the counters
    reset themselves), give identical bytes."""
    n, k = 4096, 14336
    p = layer(n, k, 128, True, torch.float16, seed=3)
    x = torch.randn(2, k, device="cuda").half()
    first = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"])
    assert torch.equal(first, w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"]))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"])
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, first)


def _same_bytes_with_pdl_and_graphs(step, want):
    """step(pdl) launches a chain of GEMVs; with PDL modes 1 and 2, eagerly and in CUDA-graph replays, every
    output must be byte-equal to the plain launches' `want`."""
    for mode in (1, 2):
        assert all(torch.equal(a, b) for a, b in zip(step(mode), want)), mode
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = step(mode)
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            assert all(torch.equal(a, b) for a, b in zip(outs, want)), mode


@gpu
@pytest.mark.parametrize("m", [1, 16])
def test_programmatic_dependent_launch_back_to_back(m):
    """With programmatic dependent launch, a GEMV may start while the previous one drains: back-to-back calls
    that share the split-K workspace (eager and in a CUDA graph) give the bytes of plain launches."""
    layers = [layer(n, k, 128, True, torch.float16, seed=10 + i) for i, (n, k) in enumerate([(4096, 4096), (4096, 14336)])]
    xs = [torch.randn(m, 4096, device="cuda").half(), torch.randn(m, 14336, device="cuda").half()]

    def step(pdl):
        return [w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, pdl=pdl) for x, p in zip(xs * 3, layers * 3)]

    want = step(0)
    assert torch.equal(want[0], want[2]) and torch.equal(want[1], want[3])
    _same_bytes_with_pdl_and_graphs(step, want)
    ref = w4a16_linear_ref(xs[1], layers[1]["qweight"], layers[1]["scales"], None, 128)
    assert rel_err(want[1], ref) < TOL[torch.float16]


@gpu
def test_scales_and_zeros_at_odd_offsets():
    """Scales / zeros that are contiguous views 2 / 1 bytes into their storage (the kernel loads row pairs with
    one wide load only where the pointers allow it)."""
    n, k = 256, 512
    p = layer(n, k, 64, False, torch.float16, seed=7)
    s = torch.empty(p["scales"].numel() + 1, dtype=torch.float16, device="cuda")[1:].view_as(p["scales"])
    z = torch.empty(p["zeros"].numel() + 1, dtype=torch.uint8, device="cuda")[1:].view_as(p["zeros"])
    s.copy_(p["scales"])
    z.copy_(p["zeros"])
    x = torch.randn(3, k, device="cuda").half()
    out = w4a16_cuda.w4a16_gemv(x, p["qweight"], s, z, 64)
    assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 64)) < TOL[torch.float16]


@gpu
@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("n,k,gs,sym", [(4096, 4096, 128, True), (257, 2112, 64, False), (6144, 4096, 128, False)])
def test_cluster_reduction_gives_the_workspace_bytes(m, n, k, gs, sym):
    """The split-K sums through cluster shared memory are the workspace path's sums in the same order."""
    p = layer(n, k, gs, sym, torch.float16, seed=n + m)
    x = torch.randn(m, k, device="cuda").half()
    for waves in (1.0, 2.0):
        name = w4a16_cuda.DEFAULT_VARIANT
        got = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name, waves=waves, cluster=True,
                                 balanced=False)
        per, split, _ = w4a16_cuda.plan_for(x.device, w4a16_cuda.build(x.device, name), name, n, k, m, gs, not sym,
                                            False, waves, None, True)
        want = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name, waves=waves, cluster=False,
                                  min_blocks=per, balanced=False)  # the same chunks, through the workspace
        assert per * split >= padded_k(k) // 128
        assert torch.equal(got, want) or split > w4a16_cuda.MAX_CLUSTER
        assert rel_err(got, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)) < TOL[torch.float16]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, cluster=True, pdl=2, balanced=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, cluster=True,
                                               balanced=False))


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
@pytest.mark.parametrize("n,k", [(28672, 4096), (4096, 14336), (6144, 4096), (1000, 2112), (257, 320), (1024, 8192)])
def test_balanced_schedule_matches_reference(dtype, gs, sym, n, k):
    """The balanced schedule (runs across row groups, partials reduced by the last piece to arrive) against the
    reference, for every variant that plans it, M in both token-tile counts; repeated calls give the same bytes."""
    p = layer(n, k, gs, sym, dtype, seed=n + k + 1)
    ran = 0
    for m in (1, 4, 9, 16):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
        for name in ("w16b2s2", "w8b2s3", "w4b2s4"):
            for waves in (0.5, 1.0):
                per, ctas, bal = w4a16_cuda.plan_for(x.device, w4a16_cuda.build(x.device, name), name, n, k, m, gs,
                                                     not sym, dtype == torch.bfloat16, waves, None, False, True)
                out = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name, waves=waves,
                                         balanced=True)
                err = rel_err(out, want)
                assert err < TOL[dtype], f"M={m} {name} waves {waves} (per {per}, {ctas} ctas, balanced {bal}): {err:.2e}"
                again = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=name, waves=waves,
                                           balanced=True)
                assert torch.equal(out, again)
                ran += bal
    assert ran > 0


@gpu
@pytest.mark.parametrize("m", [1, 16])
def test_balanced_back_to_back_with_pdl_and_graphs(m):
    """Balanced GEMVs chained with programmatic dependent launch, eager and in CUDA-graph replays (the counters
    reset themselves), give the bytes of plain balanced launches."""
    shapes = [(28672, 4096), (4096, 14336), (6144, 4096)]
    layers = [layer(n, k, 128, True, torch.float16, seed=20 + i) for i, (n, k) in enumerate(shapes)]
    xs = [torch.randn(m, k, device="cuda").half() for _, k in shapes]

    def step(pdl):
        return [w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, pdl=pdl, balanced=True)
                for x, p in zip(xs * 2, layers * 2)]

    want = step(0)
    _same_bytes_with_pdl_and_graphs(step, want)
    for x, p, got in zip(xs, layers, want):
        assert rel_err(got, w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)) < TOL[torch.float16]


@gpu
def test_leading_dims_bias_and_empty():
    n, k = 96, 384
    p = layer(n, k, 128, True, torch.float16, seed=4)
    x = torch.randn(2, 3, k, device="cuda").half()
    bias = torch.randn(n, device="cuda").half()
    out = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], bias=bias)
    want = w4a16_linear_ref(x.reshape(6, k), p["qweight"], p["scales"]).reshape(2, 3, n) + bias
    assert out.shape == (2, 3, n) and rel_err(out, want) < TOL[torch.float16]
    assert w4a16_cuda.w4a16_gemv(x[:0], p["qweight"], p["scales"]).shape == (0, 3, n)


@gpu
def test_runtime_offers_and_measures_the_cuda_path():
    from compress.runtime.paths import PathTable

    n, k = 1024, 4096
    mod = int4_runtime_layer(n, k, False, "cuda", seed=6)
    x = torch.randn(4, k, device="cuda").half()
    paths = dict(mod.kernel_paths(x))
    assert "cuda_gemv" in paths
    assert "cuda_gemv" in dict(mod.kernel_paths(torch.randn(17, k, device="cuda").half()))  # up to 64 tokens
    assert "cuda_gemv" not in dict(mod.kernel_paths(torch.randn(65, k, device="cuda").half()))
    assert rel_err(paths["cuda_gemv"](), mod.reference(x)) < TOL[torch.float16]
    table = PathTable()
    table.run(("t",), mod.kernel_paths(x), x.device)
    timed = table.timings[("t",)]
    assert "cuda_gemv" in timed and "cuda_gemv (mismatch)" not in timed and "cuda_gemv (failed)" not in timed


# ----------------------------------------------------------------------------------------------------- CPU
def cpu_layer(n=64, k=256, gs=128, sym=True, dtype=torch.float16):
    return layer(n, k, gs, sym, dtype, device="cpu")


@pytest.mark.parametrize("change,match", [
    (dict(x=torch.zeros(1, 256)), r"activations must be float16 or bfloat16, got torch.float32; cast x first"),
    (dict(group_size=32), r"group_size=32 is not supported; use one of \(64, 128\)"),
    (dict(x=torch.zeros(65, 256).half()), r"M=65 tokens is more than this GEMV's 64; use kernels.w4a16.w4a16_linear"),
    (dict(x=torch.zeros(1, 384).half()), r"qweight \(64, 32\) torch.int32 does not fit in_features=384; expected int32 \(N, 48\)"),
    (dict(scales=torch.zeros(3, 64).half()), r"scales \(3, 64\) do not match; expected \(G, N\) = \(2, 64\)"),
    (dict(scales=torch.zeros(2, 64)), r"scales are torch.float32 but x is torch.float16; cast the scales"),
    (dict(zeros=torch.zeros(2, 64, dtype=torch.int32)), r"zeros \(2, 64\) torch.int32 do not match; expected uint8"),
    (dict(scales=torch.zeros(64, 2).half().t()), r"scales is not contiguous; pass scales.contiguous\(\)"),
    ({}, r"needs CUDA tensors, got cpu; use kernels.w4a16.w4a16_linear_ref on the CPU"),
])
def test_launcher_errors_name_the_value_and_the_fix(change, match):
    p = cpu_layer()
    args = dict(x=torch.zeros(1, 256).half(), qweight=p["qweight"], scales=p["scales"], zeros=None, group_size=128)
    args.update(change)
    with pytest.raises(CompressError, match=match):
        w4a16_cuda.w4a16_gemv(**args)


def test_unaligned_qweight_is_refused():
    p = cpu_layer(n=65)
    q = p["qweight"].reshape(-1)[1:].reshape(-1)[: 64 * 32].reshape(64, 32)  # a view 4 bytes in
    with pytest.raises(CompressError, match="not 16-byte aligned"):
        w4a16_cuda.w4a16_gemv(torch.zeros(1, 256).half(), q, p["scales"][:, :64].contiguous())


def test_default_config_by_m_and_shape(monkeypatch):
    monkeypatch.delenv("COMPRESS_W4A16_VARIANT", raising=False)
    monkeypatch.delenv("COMPRESS_W4A16_BALANCE", raising=False)
    for m in range(1, 17):
        bucket = min(b for b in w4a16_cuda.DEFAULTS if m <= b)
        name, waves, cluster, bal = w4a16_cuda.default_config(m)
        assert name in w4a16_cuda.VARIANTS and waves > 0 and not cluster and not bal
        assert (name, waves) == w4a16_cuda.DEFAULTS[bucket]
        assert w4a16_cuda.default_config(m, 100, 4096) == (name, waves, False, False)  # a shape no table lists
        for (n, k), by_bucket in w4a16_cuda.TUNED.items():
            if bucket not in w4a16_cuda.BALANCED.get((n, k), {}):
                assert w4a16_cuda.default_config(m, n, k) == (*by_bucket[bucket], False)
            assert by_bucket[bucket][0] in w4a16_cuda.VARIANTS
        for (n, k), by_bucket in w4a16_cuda.BALANCED.items():
            if bucket in by_bucket:
                assert w4a16_cuda.default_config(m, n, k) == (*by_bucket[bucket], False, True)
                assert by_bucket[bucket][0] in w4a16_cuda.VARIANTS
    monkeypatch.setenv("COMPRESS_W4A16_VARIANT", "w16b2s2")
    assert w4a16_cuda.default_config(1)[0] == "w16b2s2"


def test_gpu_tables_come_before_the_h100_tables(monkeypatch, tmp_path):
    """On a GPU whose name holds a TUNED_BY_GPU key its entries serve, ahead of TUNED and BALANCED; other GPUs (and no
    GPU) get TUNED; a picks file still comes first; every entry names a build and an M bucket."""
    for var in ("COMPRESS_W4A16_VARIANT", "COMPRESS_W4A16_BALANCE", "COMPRESS_W4A16_PICKS"):
        monkeypatch.delenv(var, raising=False)
    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    assert w4a16_cuda.gpu_table(h200) is w4a16_cuda.TUNED_BY_GPU["H200"]
    assert w4a16_cuda.gpu_table(h100) == {} and w4a16_cuda.gpu_table(None) == {}
    assert w4a16_cuda.gpu_name(torch.device("cpu")) is None
    for table in w4a16_cuda.TUNED_BY_GPU.values():
        for (n, k), by_bucket in table.items():
            for bucket, (name, waves, cluster, bal) in by_bucket.items():  # keys 1 and 4: 1 and 2..4 tokens (s37)
                assert (bucket in (1, 4) or bucket in w4a16_cuda.DEFAULTS) and name in w4a16_cuda.VARIANTS and waves > 0
                assert w4a16_cuda.default_config(bucket, n, k, h200) == (name, waves, cluster, bal)
    # One token takes key 1 where the table has it, 2..4 tokens key 4, else bucket 8 (2..8 tokens).
    h200_table = w4a16_cuda.TUNED_BY_GPU["H200"]
    assert w4a16_cuda.default_config(1, 4096, 14336, h200) == h200_table[(4096, 14336)][1]
    assert w4a16_cuda.default_config(2, 4096, 14336, h200) == h200_table[(4096, 14336)][8]  # no key 4: bucket 8
    assert w4a16_cuda.default_config(4, 4096, 4096, h200) == h200_table[(4096, 4096)][4]
    assert w4a16_cuda.default_config(5, 4096, 4096, h200) == h200_table[(4096, 4096)][8]
    # 8B gate / up at one token: the H200's own winner; the H100's (TUNED) elsewhere.
    assert w4a16_cuda.default_config(1, 14336, 4096, h200) == ("w16b2s2", 1.0, False, False)
    assert w4a16_cuda.default_config(1, 14336, 4096, h100) == (*w4a16_cuda.TUNED[(14336, 4096)][8], False)
    assert w4a16_cuda.default_config(1, 14336, 4096) == w4a16_cuda.default_config(1, 14336, 4096, h100)
    # The 8B fused gate_up at 16 tokens: BALANCED's schedule on the H100, the H200 entry (not balanced) there.
    assert w4a16_cuda.default_config(16, 28672, 4096, h100)[3] is True
    assert w4a16_cuda.default_config(16, 28672, 4096, h200) == ("w8b2s2r2", 2.0, False, False)
    # A shape the H200 table leaves out at this bucket falls through to TUNED.
    assert w4a16_cuda.default_config(32, 4096, 4096, h200) == w4a16_cuda.default_config(32, 4096, 4096, h100)
    picks = tmp_path / "picks.json"
    picks.write_text('{"14336,4096": {"8": ["w8b2s3", 2.0, false, false]}}')
    monkeypatch.setenv("COMPRESS_W4A16_PICKS", str(picks))
    assert w4a16_cuda.default_config(1, 14336, 4096, h200) == ("w8b2s3", 2.0, False, False)


def test_config_source_names_the_table_that_serves(monkeypatch):
    monkeypatch.delenv("COMPRESS_W4A16_PICKS", raising=False)
    assert "TUNED_BY_GPU['H200']" in w4a16_cuda.config_source("NVIDIA H200")
    assert "not on this GPU" in w4a16_cuda.config_source("NVIDIA A100-SXM4-80GB")
    assert "not on this GPU" in w4a16_cuda.config_source(None)
    monkeypatch.setenv("COMPRESS_W4A16_PICKS", "/tmp/my_picks.json")
    assert w4a16_cuda.config_source("NVIDIA H200").startswith("the picks file /tmp/my_picks.json")


def test_balance_switch(monkeypatch):
    """COMPRESS_W4A16_BALANCE=1 balances the TUNED / default config of every shape; =0 turns BALANCED off."""
    monkeypatch.delenv("COMPRESS_W4A16_VARIANT", raising=False)
    monkeypatch.setattr(w4a16_cuda, "BALANCED", {(4096, 4096): {8: ("w4b2s4", 1.0)}})
    monkeypatch.delenv("COMPRESS_W4A16_BALANCE", raising=False)
    assert w4a16_cuda.default_config(1, 4096, 4096) == ("w4b2s4", 1.0, False, True)
    assert w4a16_cuda.default_config(16, 4096, 4096) == (*w4a16_cuda.TUNED[(4096, 4096)][16], False)
    monkeypatch.setenv("COMPRESS_W4A16_BALANCE", "0")
    assert w4a16_cuda.default_config(1, 4096, 4096) == (*w4a16_cuda.TUNED[(4096, 4096)][8], False)
    monkeypatch.setenv("COMPRESS_W4A16_BALANCE", "1")
    assert w4a16_cuda.default_config(1, 6144, 4096) == (*w4a16_cuda.TUNED[(6144, 4096)][8], True)
    assert w4a16_cuda.default_config(1, 100, 64) == (*w4a16_cuda.DEFAULTS[8], False, True)
    monkeypatch.setenv("COMPRESS_W4A16_BALANCE", "yes")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_BALANCE='yes' is not 0 or 1; unset it or pick one"):
        w4a16_cuda.default_config(1)


def test_picks_file_overrides_the_tables(monkeypatch, tmp_path):
    """COMPRESS_W4A16_PICKS (a sweep's picks.json) comes before BALANCED and TUNED, per shape and M bucket."""
    monkeypatch.delenv("COMPRESS_W4A16_VARIANT", raising=False)
    monkeypatch.delenv("COMPRESS_W4A16_BALANCE", raising=False)
    f = tmp_path / "picks.json"
    f.write_text('{"4096,4096": {"8": ["w16b2s3", 0.5, false, false]}, "28672,4096": {"16": ["w8b2s4", 1.0, false, true]}}')
    monkeypatch.setenv("COMPRESS_W4A16_PICKS", str(f))
    assert w4a16_cuda.default_config(1, 4096, 4096) == ("w16b2s3", 0.5, False, False)
    assert w4a16_cuda.default_config(16, 28672, 4096) == ("w8b2s4", 1.0, False, True)
    assert w4a16_cuda.default_config(16, 4096, 4096) == (*w4a16_cuda.TUNED[(4096, 4096)][16], False)
    # Keys 1 (one token) and 4 (2..4 tokens) come before bucket 8 (session 37); 5..8 tokens take bucket 8.
    f.write_text('{"1024,4096": {"1": ["w4b2s4", 1.0, false, false], "4": ["w8b2s3", 0.5, true, false], '
                 '"8": ["w16b2s2", 2.0, false, false]}}')
    w4a16_cuda._picks_cache.clear()
    got = {m: w4a16_cuda.default_config(m, 1024, 4096)[:3] for m in (1, 2, 4, 5, 8)}
    assert got == {1: ("w4b2s4", 1.0, False), 2: ("w8b2s3", 0.5, True), 4: ("w8b2s3", 0.5, True),
                   5: ("w16b2s2", 2.0, False), 8: ("w16b2s2", 2.0, False)}
    bad = tmp_path / "bad.json"
    bad.write_text('{"4096,4096": {"8": ["w99", 0.5, false, false]}}')
    monkeypatch.setenv("COMPRESS_W4A16_PICKS", str(bad))
    with pytest.raises(CompressError, match=r"names unknown variants \['w99'\]"):
        w4a16_cuda.default_config(1, 4096, 4096)
    monkeypatch.setenv("COMPRESS_W4A16_PICKS", str(tmp_path / "missing.json"))
    with pytest.raises(CompressError, match=r"is not a readable picks file"):
        w4a16_cuda.default_config(1)


@pytest.mark.parametrize("name,waves,ctas", [("w16b2s2", 1.0, 1), ("w8b2s3", 0.5, 2), ("w8b2s3", 1.0, 2),
                                               ("w4b2s4", 1.0, 4), ("w2b2s6", 0.5, 8)])
@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("n,k", [(1024, 4096), (4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336),
                                 (8192, 28672), (33, 192), (100, 64), (1000, 2112)])
def test_balanced_plan_gives_each_unit_to_one_cta_in_at_most_two_segments(name, waves, ctas, m, n, k):
    """Where the balanced plan applies: every (row group, block) unit is in exactly one CTA's run, runs differ
    by at most one block, a CTA touches at most two row groups, a row group's pieces are contiguous in K and in
    CTA order, and the .cu's owner formula ((u + 1) * S - 1) // units names the CTA of every piece's first unit."""
    got = w4a16_cuda.plan_balanced(n, k, m, 132, name, waves, ctas)
    rows = 16 * w4a16_cuda.VARIANTS[name][0]
    kblocks, groups = padded_k(k) // 128, -(-n // rows)
    units = groups * kblocks
    if got is None:  # only where a run would be longer than a row group or over the shared-memory budget
        c = min(units, 132 * max(1, round(ctas * waves)))
        per = -(-units // c)
        assert per > kblocks or w4a16_cuda.smem_bytes(per, m, name, asym=True) > w4a16_cuda.SMEM_BYTES  # as plan_balanced
        return
    per, c = got
    assert c <= units and c % 132 == 0 or c == units
    assert per == -(-units // c) and per <= kblocks
    assert w4a16_cuda.smem_bytes(per, m, name, asym=True) <= w4a16_cuda.SMEM_BYTES
    pieces = w4a16_cuda.balanced_pieces(n, k, rows, c)
    assert len(pieces) == groups
    lengths = [0] * c
    touched = [set() for _ in range(c)]
    for rg, ps in enumerate(pieces):
        assert ps[0][1] == 0 and sum(t for _, _, t in ps) == kblocks
        for (c0, kb0, t0), (c1, kb1, _) in zip(ps, ps[1:]):
            assert c1 == c0 + 1 and kb1 == kb0 + t0  # contiguous: piece order is K order
        for cta, kb, take in ps:
            assert (((rg * kblocks + kb) + 1) * c - 1) // units == cta
            lengths[cta] += take
            touched[cta].add(rg)
    assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1
    assert max(len(t) for t in touched) <= 2


def test_supports_is_false_on_cpu_and_with_the_kill_switch(monkeypatch):
    p = cpu_layer()
    assert not w4a16_cuda.supports(torch.zeros(1, 256).half(), p["qweight"], p["scales"], None, 128)
    monkeypatch.setenv("COMPRESS_W4A16_CUDA", "0")
    assert not w4a16_cuda.enabled()
    monkeypatch.setenv("COMPRESS_W4A16_PDL", "yes")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_PDL='yes' is not 0, 1 or 2"):
        w4a16_cuda.pdl_mode()
    monkeypatch.setenv("COMPRESS_W4A16_CLUSTER", "1")
    assert w4a16_cuda.cluster_mode() is True
    monkeypatch.setenv("COMPRESS_W4A16_PDL", "1")
    assert w4a16_cuda.pdl_mode() == 1
    monkeypatch.delenv("COMPRESS_W4A16_PDL")
    assert w4a16_cuda.pdl_mode() == w4a16_cuda.PDL_DEFAULT
    monkeypatch.setenv("COMPRESS_W4A16_CLUSTER", "2")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_CLUSTER='2' is not 0 or 1"):
        w4a16_cuda.cluster_mode()
    monkeypatch.setenv("COMPRESS_W4A16_VARIANT", "w9")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_VARIANT='w9' is not one of"):
        w4a16_cuda.default_config(1)


@pytest.mark.parametrize("name,waves,ctas", [("w4b2s4", 1.0, 4), ("w8b2s3", 2.0, 2), ("w2b2s6", 0.5, 8),
                                               ("w4b1s8", 4.0, 1)])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
@pytest.mark.parametrize("gs,asym", [(128, False), (64, True)])
@pytest.mark.parametrize("n,k", [(1024, 4096), (4096, 4096), (14336, 4096), (4096, 14336), (8192, 28672),
                                 (28672, 8192), (33, 192), (100, 64)])
def test_plan_covers_k_once_and_fits_shared_memory(name, waves, ctas, m, gs, asym, n, k):
    kblocks = padded_k(k) // 128
    per, split = w4a16_cuda.plan(n, k, m, 132, name, waves, ctas, group_size=gs, asym=asym)
    assert per >= 1 and split >= 1
    assert per * split >= kblocks and per * (split - 1) < kblocks  # every block in exactly one chunk, none empty
    assert per * 4 * 4 * m * 16 <= w4a16_cuda.STAGED_BYTES
    assert w4a16_cuda.smem_bytes(per, m, name, gs, asym) <= w4a16_cuda.SMEM_BYTES
    groups = -(-n // (16 * w4a16_cuda.VARIANTS[name][0]))
    # No more CTAs than asked for, unless K is not split or the chunk is as long as shared memory allows.
    longest = per == w4a16_cuda.STAGED_BYTES // (256 * m) or \
        w4a16_cuda.smem_bytes(per + 1, m, name, gs, asym) > w4a16_cuda.SMEM_BYTES
    assert split == 1 or longest or groups * split <= waves * 132 * ctas


def test_runtime_offers_no_cuda_path_on_cpu():
    from compress.runtime.formats_compress import Int4Linear
    from compress.runtime.spec import LayerSpec

    p = cpu_layer()
    mod = Int4Linear(LayerSpec(name="l", format="compress.int4", in_features=256, out_features=64), torch.float16,
                     p["qweight"], p["scales"], None, 128)
    assert [name for name, _ in mod.kernel_paths(torch.zeros(1, 256).half())] == ["kernel", "dequant+cublas"]


@pytest.mark.skipif(w4a16_cuda.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("w4a16")
def test_source_compiles_for_the_h100(sm90_library):
    """The default variant builds for sm_90a with this machine's nvcc (no GPU needed) and exports the entry
    points the launcher binds."""
    import ctypes

    lib = ctypes.CDLL(str(sm90_library))
    warps, blocks, slots = w4a16_cuda.VARIANTS[w4a16_cuda.DEFAULT_VARIANT]
    assert lib.w4a16_gemv_variant() == warps * 100 + blocks * 10 + slots
    assert lib.w4a16_gemv_rows_per_cta() == 16 * warps
    # The plan's shared-memory budget is the kernel's own layout.
    lib.w4a16_gemv_smem_bytes.restype = ctypes.c_long
    for per, m, gs, asym in [(1, 1, 128, 0), (13, 3, 64, 1), (8, 16, 128, 1), (112, 1, 64, 0)]:
        assert lib.w4a16_gemv_smem_bytes(per, m, gs, asym) == w4a16_cuda.smem_bytes(
            per, m, w4a16_cuda.DEFAULT_VARIANT, gs, bool(asym))


def test_split_k_workspace_is_reused_grows_and_keeps_outgrown_buffers():
    from kernels.cuda_build import SplitKWorkspace

    space, dev = SplitKWorkspace(), torch.device("cpu")
    ws, cnt = space.get(dev, 10, 10)
    assert ws.numel() == 1 << 20 and cnt.numel() == 4096 and int(cnt.abs().sum()) == 0
    assert space.get(dev, 1 << 20, 4096)[0] is ws  # fits: the same buffers
    big, big_cnt = space.get(dev, (1 << 20) + 1, 10)
    assert big is not ws and big.numel() == (1 << 20) + 1 and int(big_cnt.abs().sum()) == 0
    assert any(t is ws for t in space._outgrown)  # a captured graph may still use it
