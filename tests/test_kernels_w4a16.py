"""W4A16 kernels vs the plain-torch reference (CPU: Triton interpreter; GPU: compiled, real shapes)."""

import pytest
import torch

from compress.errors import CompressError
from kernels.cases import LLAMA_SHAPES, TEST_SHAPES_INT4, make_int4
from kernels.w4a16 import _launch, w4a16_linear, w4a16_linear_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float16: 3e-3, torch.bfloat16: 1.2e-2}
# Every path, forced: the decode GEMV (with split-K), the tensor-core kernel, and the M-based default.
CONFIGS = [None, {"kind": "gemv", "BN": 16, "num_warps": 4, "split": 2},
           {"kind": "mma", "BM": 16, "BN": 16, "num_warps": 4, "split": 2},
           {"kind": "tc", "BM": 16, "BN": 16, "num_warps": 1, "split": 2},
           {"kind": "tc", "BM": 16, "BN": 32, "num_warps": 2, "NB": 2},
           {"kind": "tcx", "BM": 16, "BN": 32, "num_warps": 2, "split": 2},
           {"kind": "tc", "BM": 16, "BN": 32, "num_warps": 2, "NB": 2, "prefetch": True, "split": 2},
           {"kind": "dequant"}]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert torch.isfinite(a).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "gemv", "mma", "tc", "tc-nb2", "tcx", "tc-prefetch", "dequant"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group_size,symmetric", [(128, True), (64, False)])
@pytest.mark.parametrize("shape", TEST_SHAPES_INT4[:3])
def test_w4a16_matches_reference(shape, group_size, symmetric, dtype, cfg):
    m, n, k = shape
    p = make_int4(n, k, group_size, symmetric, dtype, DEVICE, seed=m * 31 + n)
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    ref = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], group_size)
    out = _launch(x, p["qweight"], p["scales"], p["zeros"], group_size, cfg)
    assert out.shape == (m, n) and out.dtype == dtype
    assert rel_err(out, ref) < TOL[dtype]


@pytest.mark.parametrize("shape", TEST_SHAPES_INT4[3:])
def test_w4a16_odd_shapes_public_api(shape):
    m, n, k = shape
    p = make_int4(n, k, 64, True, torch.float16, DEVICE, seed=7)
    x = torch.randn(2, m, k, device=DEVICE).half()  # leading batch dims are kept
    bias = torch.randn(n, device=DEVICE).half()
    out = w4a16_linear(x, p["qweight"], p["scales"], None, 64, bias=bias)
    ref = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 64, bias=bias)
    assert out.shape == (2, m, n)
    assert rel_err(out, ref) < TOL[torch.float16]


def test_w4a16_rejects_bad_inputs():
    p = make_int4(32, 256, 128, True, torch.float16, DEVICE)
    x = torch.randn(1, 256, device=DEVICE).half()
    with pytest.raises(CompressError, match="in_features"):
        w4a16_linear(torch.randn(1, 512, device=DEVICE).half(), p["qweight"], p["scales"])
    with pytest.raises(CompressError, match="group_size"):
        w4a16_linear(x, p["qweight"], p["scales"], group_size=32)
    with pytest.raises(CompressError, match="scales"):
        w4a16_linear(x, p["qweight"], p["scales"], group_size=64)
    with pytest.raises(CompressError, match="float16 or bfloat16"):
        w4a16_linear(x.float(), p["qweight"], p["scales"])


def test_w4a16_opcheck():
    p = make_int4(16, 128, 128, False, torch.float16, DEVICE)
    x = torch.randn(1, 128, device=DEVICE).half()
    torch.library.opcheck(torch.ops.compress.w4a16_linear, (x, p["qweight"], p["scales"], p["zeros"], 128),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 16, 64, 256])
@pytest.mark.parametrize("name,n,k", LLAMA_SHAPES[:4])
def test_w4a16_real_shapes_gpu(name, n, k, m):
    p = make_int4(n, k, 128, True, torch.float16, DEVICE)
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(w4a16_linear(x, p["qweight"], p["scales"]), w4a16_linear_ref(x, p["qweight"], p["scales"])) < TOL[torch.float16]


GPU_PATHS = [{"kind": "tcx", "BM": 16, "BN": 128, "num_warps": 4, "num_stages": 2},
             {"kind": "tcx", "BM": 32, "BN": 128, "num_warps": 4, "num_stages": 2},
             {"kind": "tc", "BM": 64, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 1},
             {"kind": "tc", "BM": 16, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 2},
             {"kind": "dequant"}]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cfg", GPU_PATHS, ids=lambda c: f"{c['kind']}{c.get('BM', '')}")
@pytest.mark.parametrize("dtype,group_size,symmetric", [(torch.float16, 128, True), (torch.bfloat16, 64, False)])
def test_w4a16_every_path_real_shape_gpu(cfg, dtype, group_size, symmetric):
    # The inline-PTX dequantization (f16x2 / bf16x2, symmetric / zero points, g128 / g64) on an 8B down_proj.
    n, k = 4096, 14336
    p = make_int4(n, k, group_size, symmetric, dtype, DEVICE, seed=3)
    for m in (1, 7, 40):
        x = torch.randn(m, k, device=DEVICE).to(dtype)
        out = _launch(x, p["qweight"], p["scales"], p["zeros"], group_size, cfg)
        assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], group_size)) < TOL[dtype]


@pytest.mark.parametrize("split", [2, 3, 5, 7])
def test_splitk_tail_rounds_sum_in_the_same_order(split):
    """The split-K tail loads four partials per round (kernels._common.splitk_epilogue): the same bits as one
    partial per round, for split counts that are not a multiple of 4, and the reference's values.
    K = 7 blocks of 128 so that 7 splits each get one block."""
    m, n, k = 3, 32, 7 * 128
    p = make_int4(n, k, 128, True, torch.float16, DEVICE, seed=split)
    x = torch.randn(m, k, device=DEVICE).half()
    cfg = {"kind": "tc", "BM": 16, "BN": 32, "num_warps": 2, "NB": 1, "split": split}
    four = _launch(x, p["qweight"], p["scales"], None, 128, cfg)
    one = _launch(x, p["qweight"], p["scales"], None, 128, cfg | {"round": 1})
    assert torch.equal(four, one)
    assert rel_err(four, w4a16_linear_ref(x, p["qweight"], p["scales"])) < TOL[torch.float16]
