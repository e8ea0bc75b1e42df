"""The CUDA-core one-token W4A16 GEMV (kernels/w4a16_cc.py) against the plain-torch reference, its launcher's errors,
and its place among the runtime's int4 paths. The tests of what both x-staging one-token GEMVs share (activations that
would overflow fp16 sums, CUDA graphs, the runtime's path list) run the warp-specialized one (kernels/w4a16_ws.py) too."""

import ctypes
import shutil
import sys
from pathlib import Path

import pytest
import torch

from compress.errors import CompressError
from kernels import w4a16_cc, w4a16_ws
from kernels.cases import int4_runtime_layer, make_int4
from kernels.w4a16 import w4a16_linear_ref

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
# (N, K): odd N (partial CTAs and warps), K not a multiple of 128 (a padded last block; with group 64 a block whose
# second group does not exist: K = 200 -> G = 4, K = 136 -> G = 3), one block, real Llama-3 / Qwen3 shapes.
SHAPES = [(40, 256), (33, 200), (100, 136), (257, 128), (4096, 4096), (1024, 14336), (14336, 4096), (4096, 12288)]


def rel_err(a, b):
    assert torch.isfinite(a).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


# Shared by the tests of the one-token CUDA-core and warp-specialized GEMVs and the warp-specialized GEMM
# (test_w4a16_ws.py, test_w4a16_ws_gemm.py): each keeps a launch-config table in its .cu and in its Python launcher.
def cuda_config_table(src: Path, fields: int) -> list[tuple[int, ...]]:
    """The .cu's `CONFIGS[][fields] = {{...}, ...};` table, as tuples."""
    text = src.read_text()
    head = f"CONFIGS[][{fields}] = {{"
    table = text[text.index(head) + len(head):]
    table = table[: table.index("};")]
    return [tuple(int(v) for v in t.strip("{} \n").split(",")) for t in table.split("},")]


def built_library(module, prefix: str, variant: str, tmp_path, monkeypatch) -> ctypes.CDLL:
    """Build `module`'s library on this CPU machine for sm_90a (as bench/kernel_cache.py packs it) into tmp_path and
    load it; its config table (`<prefix>_num_configs`, `<prefix>_config`) must be the launcher's CONFIGS, and the kernel
    cache must pack (module, variant). Returns the loaded library for the caller's own checks."""
    monkeypatch.setenv("COMPRESS_KERNEL_CACHE", str(tmp_path))
    lib = module.compile_variant("90a")
    assert lib.parent == tmp_path and lib.exists()
    so = ctypes.CDLL(str(lib))
    configs, fields = module.CONFIGS, len(module.CONFIGS[0])
    assert getattr(so, f"{prefix}_num_configs")() == len(configs)
    assert [tuple(getattr(so, f"{prefix}_config")(i, f) for f in range(fields)) for i in range(len(configs))] == configs
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        import kernel_cache
    finally:
        sys.path.pop(0)
    assert (module.__name__.split(".")[-1], variant) in kernel_cache.builds(["w4a16"])
    return so


# ----------------------------------------------------------------------------------------------------- CPU
def test_launcher_errors_name_the_value_and_the_fix():
    p = make_int4(64, 256, 128, True, torch.float16, "cpu")
    with pytest.raises(CompressError, match=r"M=2 tokens; this GEMV takes one token, use kernels.w4a16_cuda"):
        w4a16_cc.w4a16_cc_gemv(torch.randn(2, 256).half(), p["qweight"], p["scales"])
    q = make_int4(64, 252, 128, True, torch.float16, "cpu")
    with pytest.raises(CompressError, match=r"in_features=252 is not a multiple of 8"):
        w4a16_cc.w4a16_cc_gemv(torch.randn(1, 252).half(), q["qweight"], q["scales"])
    with pytest.raises(CompressError, match=r"scales are torch.float16 but x is torch.bfloat16"):
        w4a16_cc.w4a16_cc_gemv(torch.randn(1, 256).bfloat16(), p["qweight"], p["scales"])
    with pytest.raises(CompressError, match=r"needs CUDA tensors, got cpu"):
        w4a16_cc.w4a16_cc_gemv(torch.randn(1, 256).half(), p["qweight"], p["scales"])
    assert not w4a16_cc.supports(torch.randn(1, 256).half(), p["qweight"], p["scales"], None, 128)


def test_persistent_override_is_checked(monkeypatch):
    monkeypatch.setenv("COMPRESS_W4A16_CC_PERSIST", "yes")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_CC_PERSIST='yes' is not 0 or 1"):
        w4a16_cc.persistent()
    monkeypatch.setenv("COMPRESS_W4A16_CC_PERSIST", "1")
    assert w4a16_cc.persistent() is True


def test_config_override_is_checked(monkeypatch):
    monkeypatch.setenv("COMPRESS_W4A16_CC_CONFIG", "99")
    with pytest.raises(CompressError, match=r"COMPRESS_W4A16_CC_CONFIG='99' is not a config index 0\.\.5"):
        w4a16_cc.config_for(4096, 4096)
    monkeypatch.setenv("COMPRESS_W4A16_CC_CONFIG", "3")
    assert w4a16_cc.config_for(4096, 4096) == 3
    monkeypatch.delenv("COMPRESS_W4A16_CC_CONFIG")
    assert w4a16_cc.config_for(1024, 4096, "NVIDIA H200") == 1  # measured there
    assert w4a16_cc.config_for(1024, 4096, "NVIDIA H100 80GB HBM3") == w4a16_cc.DEFAULT_CONFIG  # not measured there
    assert w4a16_cc.config_for(4096, 4096, "NVIDIA H200") == w4a16_cc.DEFAULT_CONFIG
    assert w4a16_cc.persistent(28672, 8192, "NVIDIA H200") is True  # measured there
    assert w4a16_cc.persistent(28672, 8192, "NVIDIA H100 80GB HBM3") is w4a16_cc.PERSISTENT


def test_configs_match_the_cuda_table():
    assert cuda_config_table(w4a16_cc.SRC, 3) == w4a16_cc.CONFIGS


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_library_builds_for_hopper_here_and_is_packed_for_the_gpu_machines(tmp_path, monkeypatch):
    """Built on this CPU machine for sm_90a (as bench/kernel_cache.py packs it), the library loads, its config table is
    the launcher's, and the kernel cache packs it."""
    built_library(w4a16_cc, "w4cc", "cc", tmp_path, monkeypatch)


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs", [64, 128])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_every_config_matches_reference_and_repeats_its_bytes(dtype, gs, sym, n, k):
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k + gs)
    x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k)).to(dtype)
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
    for c in range(len(w4a16_cc.CONFIGS)):
        for pdl, persist in ((0, False), (2, False), (2, True)):
            out = w4a16_cc._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl, persist=persist)
            assert out.shape == (1, n) and out.dtype == dtype
            assert rel_err(out, want) < TOL[dtype], f"config {c} pdl {pdl} persistent {persist}"
            again = w4a16_cc._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c, pdl=pdl, persist=persist)
            assert torch.equal(out, again)


# The one-token GEMVs that stage x scaled per 128-block (w4a16_cc_common.cuh), and the runtime path name of each.
ONE_TOKEN = [(w4a16_cc.w4a16_cc_gemv, "cuda_cc_gemv"), (w4a16_ws.w4a16_ws_gemv, "cuda_ws_gemv")]
one_token = pytest.mark.parametrize("gemv,path", ONE_TOKEN, ids=["cc", "ws"])


@gpu
@one_token
@pytest.mark.parametrize("dtype,big", [(torch.float16, 30000.0), (torch.bfloat16, 1e6), (torch.float16, 1e-3)],
                         ids=["fp16-30000", "bf16-1e6", "fp16-tiny"])
def test_large_and_small_activations_neither_overflow_nor_lose_precision(dtype, big, gemv, path):
    """A few huge entries, as LLM activations have: in fp16 a product of |u - z| <= 15 and x = 30000 overflows, so the
    kernel stages x scaled by a power of two (and never scales tiny ones up past what fp16 holds)."""
    n, k = 512, 1024
    p = make_int4(n, k, 128, False, dtype, "cuda", seed=3)
    x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    if big > 1:
        x[0, 7], x[0, 500] = big, -big / 2
    else:
        x = x * big
    x = x.to(dtype)
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
    out = gemv(x, p["qweight"], p["scales"], p["zeros"], 128)
    assert rel_err(out, want) < TOL[dtype]


@gpu
@one_token
def test_cuda_graph_replay_and_leading_dims(gemv, path):
    n, k = 4096, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=9)
    x = torch.randn(1, 1, k, device="cuda").half()
    want = gemv(x, p["qweight"], p["scales"], None, 128)
    assert want.shape == (1, 1, n)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            got = gemv(x, p["qweight"], p["scales"], None, 128)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(got, want)


@gpu
@one_token
def test_runtime_offers_the_path_at_one_token_only(gemv, path):
    from compress.runtime.paths import PathTable

    n, k = 1024, 4096
    mod = int4_runtime_layer(n, k, False, "cuda", seed=6)
    x = torch.randn(1, k, device="cuda").half()
    paths = dict(mod.kernel_paths(x))
    assert path in paths
    assert path not in dict(mod.kernel_paths(torch.randn(2, k, device="cuda").half()))
    assert rel_err(paths[path](), mod.reference(x)) < TOL[torch.float16]
    table = PathTable()
    table.run(("t",), mod.kernel_paths(x), x.device)
    timed = table.timings[("t",)]
    # it ran and matched the first path (no "(failed)" / "(mismatch)" entry; "(preferred)" notes an H200 preference)
    assert path in timed and f"{path} (failed)" not in timed and f"{path} (mismatch)" not in timed
