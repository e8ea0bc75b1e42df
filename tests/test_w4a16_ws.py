"""The warp-specialized one-token W4A16 GEMV (kernels/w4a16_ws.py) against the plain-torch reference and its launcher's
errors. Large and small activations, CUDA graphs and the runtime's path list: tests/test_w4a16_cc.py (`one_token`)."""

import shutil

import pytest
import torch

from compress.errors import CompressError
from kernels import w4a16_ws
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

from tests.test_w4a16_cc import TOL, built_library, cuda_config_table, gpu, rel_err

# (N, K): fewer rows than a row group (8), K not a multiple of 128 (a partial last stage; with group 64 a block whose
# second group does not exist: K = 200 -> G = 4, K = 136 -> G = 3), one block, more row groups than CTAs, real shapes.
SHAPES = [(8, 256), (40, 200), (104, 136), (256, 128), (4096, 4096), (1024, 14336), (14336, 4096), (4096, 12288)]


# ----------------------------------------------------------------------------------------------------- CPU
def test_launcher_errors_name_the_value_and_the_fix():
    p = make_int4(64, 256, 128, True, torch.float16, "cpu")
    with pytest.raises(CompressError, match=r"M=2 tokens; this GEMV takes one token"):
        w4a16_ws.w4a16_ws_gemv(torch.randn(2, 256).half(), p["qweight"], p["scales"])
    with pytest.raises(CompressError, match=r"needs CUDA tensors, got cpu"):
        w4a16_ws.w4a16_ws_gemv(torch.randn(1, 256).half(), p["qweight"], p["scales"])
    assert not w4a16_ws.supports(torch.randn(1, 256).half(), p["qweight"], p["scales"], None, 128)


def test_config_override_is_checked(monkeypatch):
    monkeypatch.setenv("COMPRESS_W4A16_WS_CONFIG", "99")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_WS_CONFIG='99' is not a config index 0\.\.16"):
        w4a16_ws.config_for(4096, 4096)
    monkeypatch.setenv("COMPRESS_W4A16_WS_CONFIG", "3")
    assert w4a16_ws.config_for(4096, 4096) == 3
    monkeypatch.delenv("COMPRESS_W4A16_WS_CONFIG")
    assert w4a16_ws.config_for(6144, 4096, "NVIDIA H200") == 2  # measured there
    assert w4a16_ws.config_for(4096, 4096, "NVIDIA H200") == w4a16_ws.DEFAULT_CONFIG
    assert w4a16_ws.config_for(6144, 4096, "NVIDIA H100 80GB HBM3") == w4a16_ws.DEFAULT_CONFIG  # not measured there
    assert w4a16_ws.config_for(57344, 8192, "NVIDIA H200") == 9  # a fused shape, chosen inside the decode graph
    assert all(0 <= c < len(w4a16_ws.CONFIGS) for t in w4a16_ws.TUNED_BY_GPU.values() for c in t.values())


def test_configs_match_the_cuda_table():
    assert cuda_config_table(w4a16_ws.SRC, 4) == w4a16_ws.CONFIGS


def test_a_shape_without_a_measured_config_is_offered_under_each_search_config(monkeypatch):
    """The path table then times the configs (compress.runtime.formats_compress); a measured shape keeps its one."""
    monkeypatch.delenv("COMPRESS_W4A16_WS_CONFIG", raising=False)
    search = set(w4a16_ws.SEARCH_CONFIGS)
    assert w4a16_ws.DEFAULT_CONFIG in search and set(w4a16_ws.TUNED_BY_GPU["H200"].values()) <= search
    assert w4a16_ws.candidate_configs(6144, 4096, "NVIDIA H200") == [2]
    assert w4a16_ws.candidate_configs(4096, 4096, "NVIDIA H200") == [w4a16_ws.DEFAULT_CONFIG]  # measured: the default
    for new in ((4608, 3584, "NVIDIA H200"), (6144, 4096, "NVIDIA H100 80GB HBM3"), (6144, 4096, None)):
        got = w4a16_ws.candidate_configs(*new)
        assert got[0] == w4a16_ws.DEFAULT_CONFIG and sorted(got) == sorted(search) and len(set(got)) == len(got)
    monkeypatch.setenv("COMPRESS_W4A16_WS_CONFIG", "5")  # forced: that one everywhere
    assert w4a16_ws.candidate_configs(4608, 3584, None) == [5] and w4a16_ws.config_for(4608, 3584) == 5


def test_the_runtime_lists_the_search_configs_as_paths_that_rebind(monkeypatch):
    """A compress.int4 layer's WS GEMV paths on a shape without a measured config (here: no GPU, so no table): one per
    search config, named for paths.family, each a partial the layer's cached path can rebind (QuantLinear._rebindable).
    On a GPU `kernel_paths` offers them where the WS GEMV `supports` the call."""
    from compress.runtime.paths import family
    from kernels.cases import int4_runtime_layer

    monkeypatch.delenv("COMPRESS_W4A16_WS_CONFIG", raising=False)
    layer = int4_runtime_layer(64, 256, True, "cpu", seed=1)
    x2d = torch.randn(1, 256).half()
    paths = layer._ws_config_paths(x2d, "cuda_ws_gemv", "w4a16_ws_gemv")
    configs = w4a16_ws.candidate_configs(64, 256, None)
    assert [n for n, _ in paths] == ["cuda_ws_gemv"] + [f"cuda_ws_gemv#{c}" for c in configs[1:]]
    assert family([n for n, _ in paths] + ["cuda_gemv"], "cuda_ws_gemv") == [n for n, _ in paths]
    assert [fn.keywords["config"] for _, fn in paths] == configs
    assert all(layer._rebindable(fn, x2d) is not None for _, fn in paths)
    monkeypatch.setenv("COMPRESS_W4A16_WS_CONFIG", "5")
    (name, fn), = layer._ws_config_paths(x2d, "cuda_ws_gemv", "w4a16_ws_gemv")
    assert name == "cuda_ws_gemv" and "config" not in fn.keywords  # the launcher looks it up


def test_the_custom_op_takes_the_config_and_has_a_fake():
    """The op's schema carries the config (-1: the measured one): its fake gives the output's shape under FakeTensorMode
    (torch.compile, CUDA graphs), and the real op reaches the launcher's checks."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    p = make_int4(64, 256, 128, True, torch.float16, "cpu")
    with FakeTensorMode() as mode:
        fx, fq, fs = (mode.from_tensor(t) for t in (torch.randn(1, 256).half(), p["qweight"], p["scales"]))
        out = torch.ops.compress.w4a16_ws_gemv(fx, fq, fs, None, 128, 5)
    assert out.shape == (1, 64) and out.dtype == torch.float16
    with pytest.raises(CompressError, match=r"needs CUDA tensors, got cpu"):
        torch.ops.compress.w4a16_ws_gemv(torch.randn(1, 256).half(), p["qweight"], p["scales"], None, 128, 5)


def test_a_bad_config_argument_is_refused_with_the_fix():
    p = make_int4(64, 256, 128, True, torch.float16, "cpu")
    with pytest.raises(CompressError, match=r"config=99 is not an index of CONFIGS \(0\.\.16\); pass None"):
        w4a16_ws.w4a16_ws_gemv(torch.randn(1, 256).half(), p["qweight"], p["scales"], config=99)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_library_builds_for_hopper_here_and_is_packed_for_the_gpu_machines(tmp_path, monkeypatch):
    """Built on this CPU machine for sm_90a (as bench/kernel_cache.py packs it), the library loads, its config table is
    the launcher's, and the kernel cache packs it."""
    so = built_library(w4a16_ws, "w4ws", "ws", tmp_path, monkeypatch)
    # The entry point's checks return before any CUDA call (so they run here); the launcher maps each code to its line.
    w4a16_ws._bind(so)
    a = 1 << 12  # an aligned address that is never read: every call below is refused first
    calls = {-1: (a, 64, 256, 128, 99), -2: (a, 64, 256, 32, 0), -3: (a, 64, 252, 128, 0), -4: (a + 2, 64, 256, 128, 0),
             -6: (a, 60, 256, 128, 0)}
    for rc, (x, n, k, g, c) in calls.items():
        assert so.w4ws_gemv(x, 0, a, a, None, a, n, k, g, c, 0, 0, None) == rc
        assert rc in w4a16_ws._RC


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
def test_rows_not_a_multiple_of_8_are_refused_with_the_fix():
    p = make_int4(36, 256, 128, True, torch.float16, "cuda")
    x = torch.randn(1, 256, device="cuda").half()
    with pytest.raises(CompressError, match=r"out_features=36 is not a multiple of 8; use kernels.w4a16_cc"):
        w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"])
    assert not w4a16_ws.supports(x, p["qweight"], p["scales"], None, 128)


@gpu
def test_the_config_argument_selects_the_launch_config():
    """w4a16_ws_gemv(config=c), the custom op the runtime's search paths call, runs config c: the same bytes as the
    launcher given c, and the reference's values."""
    n, k = 1024, 14336
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=7)
    x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(7)).half()
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
    for c in w4a16_ws.SEARCH_CONFIGS:
        out = w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"], config=c)
        assert torch.equal(out, w4a16_ws._launch(x, p["qweight"], p["scales"], None, 128, config=c))
        assert rel_err(out, want) < TOL[torch.float16], f"config {c}"


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs", [64, 128])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_every_config_matches_reference_and_repeats_its_bytes(dtype, gs, sym, n, k):
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k + gs)
    x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k)).to(dtype)
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
    for c in range(len(w4a16_ws.CONFIGS)):
        for pdl, grid in ((0, 0), (2, 0), (2, 3)):  # a grid of 3 CTAs: several row groups each, the ring wrapping
            out = w4a16_ws._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl, max_grid=grid)
            assert out.shape == (1, n) and out.dtype == dtype
            assert rel_err(out, want) < TOL[dtype], f"config {c} pdl {pdl} grid {grid}"
            again = w4a16_ws._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl, max_grid=grid)
            assert torch.equal(out, again)


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("sym,gs", [(True, 128), (False, 64)], ids=["sym128", "asym64"])
def test_a_prepared_launch_gives_the_launchers_bytes(dtype, sym, gs):
    """PreparedGemv (the runtime's eager path: weights checked once) returns w4a16_ws_gemv's bytes under every config
    the runtime may ask for, for 2-d, 3-d and strided x; an x it was not made for meets the launcher's own error."""
    n, k = 1024, 4096
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=11)
    x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(11)).to(dtype)
    for c in (None, *w4a16_ws.SEARCH_CONFIGS):
        prep = w4a16_ws.PreparedGemv(p["qweight"], p["scales"], p["zeros"], gs, k, config=c)
        want = w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"], p["zeros"], gs, config=c)
        assert torch.equal(prep(x), want), f"config {c}"
    assert torch.equal(prep(x.reshape(1, 1, k)), want.reshape(1, 1, n))
    strided = torch.stack([x[0], x[0]], dim=1).reshape(1, 2 * k)[:, ::2]  # a view with stride 2
    assert not strided.is_contiguous() and torch.equal(prep(strided), want)
    with pytest.raises(CompressError, match=r"M=2 tokens; this GEMV takes one token"):
        prep(torch.randn(2, k, device="cuda").to(dtype))
    with pytest.raises(CompressError, match=r"activations must be float16 or bfloat16"):
        prep(x.float())


@gpu
def test_the_runtime_layer_keeps_its_prepared_launch_out_of_copies_and_drops_it_when_moved():
    import copy
    import pickle

    from kernels.cases import int4_runtime_layer

    layer = int4_runtime_layer(1024, 4096, True, "cuda", seed=12)
    x = torch.randn(1, 4096, device="cuda").half()
    want = w4a16_ws.w4a16_ws_gemv(x, layer.qweight, layer.scales, None, 128)
    assert torch.equal(layer.ws_gemv(x), want) and None in layer.__dict__["_ws_prepared"]
    twin = copy.deepcopy(layer)
    assert "_ws_prepared" not in twin.__dict__ and torch.equal(twin.ws_gemv(x), want)
    again = pickle.loads(pickle.dumps(twin))
    assert "_ws_prepared" not in again.__dict__ and torch.equal(again.ws_gemv(x), want)
    layer.scales.mul_(2)  # in place: the same memory, which the prepared launch reads
    assert torch.equal(layer.ws_gemv(x), w4a16_ws.w4a16_ws_gemv(x, layer.qweight, layer.scales, None, 128))
    layer.half()  # .half(), .to(), .cuda() may give new tensors: the prepared launches go
    assert "_ws_prepared" not in layer.__dict__
