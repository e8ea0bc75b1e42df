"""2:4 sparse kernels (fp16/bf16 and W8A8 int8 values) vs the plain-torch reference."""

import pytest
import torch

from compress.errors import CompressError
from kernels.cases import LLAMA_SHAPES, TEST_SHAPES_SPARSE, make_sparse24
from kernels.sparse24 import (
    _launch,
    sparse24_linear,
    sparse24_linear_ref,
    sparse24_w8a8_linear,
    sparse24_w8a8_linear_ref,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float16: 3e-3, torch.bfloat16: 1.2e-2}
CONFIGS = [None, {"kind": "gemv", "BN": 16, "BW": 2, "num_warps": 4, "split": 2},
           {"kind": "mma", "BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "split": 2},
           {"kind": "gemv", "BN": 16, "BW": 2, "num_warps": 4, "split": 2, "XB": True},
           {"kind": "prmt", "BN": 16, "BW": 1, "num_warps": 4, "split": 2}]


def rel_err(a, b):
    assert torch.isfinite(a).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "gemv", "mma", "gemv-xb", "prmt"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", TEST_SHAPES_SPARSE)
def test_sparse24_float_matches_reference(shape, dtype, cfg):
    m, n, k = shape
    if cfg and cfg["kind"] in ("gemv", "prmt"):
        m = min(m, 3)  # decode kernels: one program per token, slow in the CPU interpreter
    p = make_sparse24(n, k, dtype, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    out = _launch(x, p["values"], p["meta"], None, cfg)
    assert out.shape == (m, n) and out.dtype == dtype
    assert rel_err(out, sparse24_linear_ref(x, p["values"], p["meta"])) < TOL[dtype]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "gemv", "mma", "gemv-xb", "prmt"])
@pytest.mark.parametrize("shape", TEST_SHAPES_SPARSE)
def test_sparse24_int8_matches_reference(shape, cfg):
    m, n, k = shape
    if cfg and cfg["kind"] in ("gemv", "prmt"):
        m = min(m, 3)  # decode kernels: one program per token, slow in the CPU interpreter
    p = make_sparse24(n, k, torch.int8, DEVICE, seed=n * k)
    x = torch.randn(m, k, device=DEVICE).half()
    out = _launch(x, p["values"], p["meta"], p["w_scale"], cfg)
    ref = sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])
    assert rel_err(out, ref) < 3e-3


@pytest.mark.parametrize("shape", [(1, 48, 256), (2, 40, 264), (1, 33, 96)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sparse24_int8_fused_quantization_is_bit_exact(shape, dtype):
    # "fused": every program quantizes x itself (the fp64-reciprocal codes); the output must be the same bits as
    # with x quantized once by kernels.w8a8.quantize_per_token (odd N, K not a multiple of 32, split-K, 2 tokens).
    m, n, k = shape
    p = make_sparse24(n, k, torch.int8, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype) * 3
    cfg = {"kind": "prmt", "BN": 16, "BW": 1, "num_warps": 4, "split": 2}
    out = _launch(x, p["values"], p["meta"], p["w_scale"], dict(cfg, fused=True))
    assert torch.isfinite(out).all()
    assert torch.equal(out, _launch(x, p["values"], p["meta"], p["w_scale"], cfg))
    assert rel_err(out, sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])) < TOL[dtype]


def test_sparse24_public_api():
    p = make_sparse24(24, 64, torch.float16, DEVICE)
    x = torch.randn(2, 3, 64, device=DEVICE).half()
    bias = torch.randn(24, device=DEVICE).half()
    out = sparse24_linear(x, p["values"], p["meta"], bias)
    assert out.shape == (2, 3, 24)
    assert rel_err(out, sparse24_linear_ref(x, p["values"], p["meta"], bias)) < 3e-3
    q = make_sparse24(24, 64, torch.int8, DEVICE)
    out = sparse24_w8a8_linear(x, q["values"], q["meta"], q["w_scale"])
    assert rel_err(out, sparse24_w8a8_linear_ref(x, q["values"], q["meta"], q["w_scale"])) < 3e-3


def test_sparse24_rejects_bad_inputs():
    p = make_sparse24(16, 64, torch.float16, DEVICE)
    x = torch.randn(1, 64, device=DEVICE).half()
    with pytest.raises(CompressError, match="in_features"):
        sparse24_linear(torch.randn(1, 128, device=DEVICE).half(), p["values"], p["meta"])
    with pytest.raises(CompressError, match="meta"):
        sparse24_linear(x, p["values"], p["meta"][:, :1])
    with pytest.raises(CompressError, match="cast"):
        sparse24_linear(x.bfloat16(), p["values"], p["meta"])
    q = make_sparse24(16, 64, torch.int8, DEVICE)
    with pytest.raises(CompressError, match="w_scale"):
        sparse24_w8a8_linear(x, q["values"], q["meta"], q["w_scale"][:2])


def test_sparse24_opcheck():
    p = make_sparse24(16, 64, torch.float16, DEVICE)
    x = torch.randn(1, 64, device=DEVICE).half()
    torch.library.opcheck(torch.ops.compress.sparse24_linear, (x, p["values"], p["meta"]),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 16, 256])
@pytest.mark.parametrize("name,n,k", LLAMA_SHAPES[:4])
def test_sparse24_real_shapes_gpu(name, n, k, m):
    p = make_sparse24(n, k, torch.float16, DEVICE)
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(sparse24_linear(x, p["values"], p["meta"]), sparse24_linear_ref(x, p["values"], p["meta"])) < 3e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("cfg", [{"kind": "prmt", "BN": 16, "BW": 8, "num_warps": 4, "waves": 4},
                                 {"kind": "prmt", "BN": 32, "BW": 8, "num_warps": 4, "waves": 4, "pdl": 2048}],
                         ids=["prmt", "prmt-pdl"])
def test_sparse24_prmt_real_shape_gpu(dtype, cfg):
    n, k = 14336, 4096
    p = make_sparse24(n, k, dtype, DEVICE, seed=11)
    for m in (1, 3):
        x = torch.randn(m, k, device=DEVICE).to(torch.bfloat16 if dtype == torch.bfloat16 else torch.float16)
        if dtype == torch.int8:
            out = _launch(x, p["values"], p["meta"], p["w_scale"], cfg)
            ref = sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])
        else:
            out = _launch(x, p["values"], p["meta"], None, cfg)
            ref = sparse24_linear_ref(x, p["values"], p["meta"])
        assert rel_err(out, ref) < TOL.get(x.dtype, 3e-3)
