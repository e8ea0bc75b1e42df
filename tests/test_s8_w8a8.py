"""Session 8 W8A8 paths (kernels/w8a8.py) vs the plain-torch reference: the one-launch few-token GEMV that quantizes
x in every program ("xf"), the late PDL trigger ("chain": "late"), the in-kernel-quantizing GEMM under PDL, the GEMM
alone on pre-quantized x (`_gemm`, what the sweeps time) and exact-M tuned configs."""

import json

import pytest
import torch

from kernels.cases import LLAMA_SHAPES, TEST_SHAPES_W8A8, make_w8a8
from kernels.w8a8 import _config, _gemm, _launch, quantize_per_token, w8a8_linear, w8a8_linear_ref

from tests.test_kernels_w8a8 import DEVICE, TOL, check_chained_in_a_cuda_graph, compile_for_the_h100, rel_err

GEMV = {"kind": "gemv", "num_warps": 4}
XF = {"kind": "gemv", "num_warps": 4, "xf": True}
XF_SMALL = {"kind": "gemv", "num_warps": 4, "xf": True, "BN": 8, "BW": 16}  # several K steps on the small shapes
GEMM = {"BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "fused": False, "split": 1}
CANDIDATES = {  # the sweep's new configs at M <= 16 (bench/results/h100/kernels_s8_w8a8/sweep_s8.py), small tiles here
    "xf": XF_SMALL,
    "xf-chain": dict(XF_SMALL, pdl=1, chain=1),
    "gemm-late": dict(GEMM, split=2, pdl=2048, chain="late"),
    "fused-pdl": dict(GEMM, fused=True, split=2, pdl=2048, chain=1),
    "gemm-fit": dict(GEMM, split=None, fit=1, pdl=2048),
}
SMALL_M = [(m, n, k) for m, n, k in TEST_SHAPES_W8A8 if m <= 16] + [(2, 72, 96), (4, 40, 1040), (16, 24, 64), (7, 8, 16)]


@pytest.mark.parametrize("name", list(CANDIDATES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SMALL_M)
def test_candidates_match_reference(shape, dtype, name):
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype) * torch.logspace(-2, 1, m, device=DEVICE)[:, None].to(dtype)
    out = _launch(x, wq, ws, CANDIDATES[name])
    assert out.shape == (m, n) and out.dtype == dtype
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SMALL_M)
def test_xf_gemv_equals_the_two_launch_gemv_bitwise(shape, dtype):
    # The in-program quantization gives quantize_per_token's codes and scales exactly (fp64 reciprocal, exact
    # quotient), the sums are exact int32 and the epilogue is the same: same bits as quantizer + GEMV.
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype) * 3
    assert torch.equal(_launch(x, wq, ws, XF_SMALL), _launch(x, wq, ws, dict(GEMV, BN=8, BW=16)))
    assert torch.equal(_launch(x, wq, ws, XF), _launch(x, wq, ws, GEMV))


def test_xf_gemv_all_zero_token_gives_zero_row():
    # absmax 0 -> scale EPS / 127, codes 0: a zero row of x must give a zero row of y (no NaN from 0 / 0).
    wq, ws = make_w8a8(40, 96, DEVICE, seed=1)
    x = torch.randn(3, 96, device=DEVICE).half()
    x[1] = 0
    out = _launch(x, wq, ws, XF_SMALL)
    assert torch.isfinite(out).all() and (out[1] == 0).all()
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]


@pytest.mark.parametrize("shape", [(3, 40, 208), (20, 33, 128), (70, 16, 160)])
def test_gemm_alone_on_quantized_x_equals_the_launcher(shape):
    # `_gemm` on quantize_per_token's output is the launcher's GEMM without the quantizer (what the sweep times).
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).half()
    xq, sx = quantize_per_token(x)
    out = torch.empty(m, n, device=DEVICE, dtype=x.dtype)
    assert torch.equal(_gemm(xq, sx, wq, ws, out, GEMM), _launch(x, wq, ws, GEMM))


def test_fit_splits_k_within_the_programs_per_sm():
    # 8B down_proj at M = 16 with 64-row weight tiles of 256 K: 64 tiles, 56 K steps, on the H100's 132 SMs (the
    # interpreter's default): "fit" 1 -> 2 splits (128 programs), "fit" 2 -> 4 (256); session 5's `waves` 1 rounds up
    # to 3 (192). K steps per split stay >= 2 (16 tiles x 8 steps: 4 splits, not 8).
    from kernels._common import config_split as _split

    cpu = torch.device("cpu")
    assert [_split(64, 56, {"fit": f}, cpu) for f in (1, 2)] == [2, 4]
    assert _split(64, 56, {"waves": 1}, cpu) == 3 and _split(64, 56, {"split": 5, "fit": 1}, cpu) == 5
    assert _split(16, 8, {"fit": 1}, cpu) == 4 and _split(448, 32, {"fit": 1}, cpu) == 1


def test_deep_pipeline_only_where_the_grid_fits_one_program_per_sm():
    # "deep" stages where the grid holds <= one program per SM (132 on the H100, the interpreter's default), else
    # "num_stages": 70B q/o at M = 16 runs 128 programs (6 stages), 8B gate/up 224 (4).
    from kernels.w8a8 import _stages

    cpu = torch.device("cpu")
    cfg = _config(16)
    assert cfg["fit"] == 1 and _stages(128, cfg, cpu) == 6 and _stages(224, cfg, cpu) == 4
    assert "deep" not in _config(4) and _stages(128, _config(4), cpu) == 4
    assert _config(2)["kind"] == "gemv" and _config(17) == _config(32)


@pytest.mark.parametrize("m", [3, 4, 5, 8, 16])
def test_session8_default_matches_reference(m):
    n, k = 200, 1040  # 4 weight tiles of 64, 4 K steps of 256 (the last one partial): split-K by "fit"
    wq, ws = make_w8a8(n, k, DEVICE, seed=m)
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 300), (2, 14336), (1, 16)])
def test_quantizer_reciprocal_codes_equal_the_division(shape, dtype):
    # "qrecip": codes from the exact fp64 reciprocal of s must be the division's codes bit for bit (rows spanning five
    # decades of scale, ties included by construction: values k * s / 2 round to even).
    from kernels.w8a8 import quantize_per_token_ref

    m, k = shape
    x = torch.randn(m, k, device=DEVICE).to(dtype) * torch.logspace(-3, 2, m, device=DEVICE)[:, None].to(dtype)
    x[0, : min(k, 8)] = torch.tensor([127.0, 0.5, 1.5, -2.5, 63.5, -0.5, 3.0, 125.5][: min(k, 8)], device=DEVICE).to(dtype)
    q, s = quantize_per_token(x, recip=True)
    qd, sd = quantize_per_token(x)
    qr, sr = quantize_per_token_ref(x)
    assert torch.equal(s, sr) and torch.equal(sd, sr)
    assert torch.equal(q, qr) and torch.equal(qd, qr)


@pytest.mark.parametrize("chunk", [64, 128, 4096])
@pytest.mark.parametrize("shape", [(5, 300), (3, 1040)])
def test_quantizer_chunks_give_the_same_codes(shape, chunk):
    # "qchunk" (session 13): several programs per row, each writing the codes of one chunk from the whole row's scale;
    # chunks that do not divide the row (300 / 64, 1040 / 128) and one longer than the row (4096: one program).
    from kernels.w8a8 import quantize_per_token_ref

    m, k = shape
    x = torch.randn(m, k, device=DEVICE).half() * torch.logspace(-2, 1, m, device=DEVICE)[:, None].half()
    qr, sr = quantize_per_token_ref(x)
    for recip in (False, True):
        q, s = quantize_per_token(x, recip=recip, chunk=chunk)
        assert torch.equal(s, sr) and torch.equal(q, qr)


@pytest.mark.parametrize("kw", [{"warps": 3}, {"warps": 64}, {"chunk": 3000}, {"chunk": -128}])
def test_quantizer_refuses_bad_warps_and_chunks(kw):
    from compress.errors import CompressError

    with pytest.raises(CompressError, match=f"{next(iter(kw))}={next(iter(kw.values()))} is not"):
        quantize_per_token(torch.randn(2, 64, device=DEVICE).half(), **kw)


def test_qrecip_config_matches_reference():
    wq, ws = make_w8a8(72, 208, DEVICE, seed=4)
    x = torch.randn(5, 208, device=DEVICE).half()
    for cfg in (dict(GEMM, qrecip=True), dict(_config(5), qrecip=True), dict(GEMV, qrecip=True)):
        assert rel_err(_launch(x, wq, ws, cfg), w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]


def test_exact_m_tuned_entry_wins_over_the_bucket(tmp_path, monkeypatch):
    bucket = dict(GEMM, split=2)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"w8a8": {"16": bucket}, "w8a8@4": {"16": XF}}))
    monkeypatch.setenv("COMPRESS_KERNEL_CONFIGS", str(path))
    assert _config(4) == XF and _config(5) == bucket and _config(3) == bucket
    wq, ws = make_w8a8(24, 64, DEVICE)
    x = torch.randn(4, 64, device=DEVICE).half()
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.w8a8 as w8

P16, P32, I32 = "*fp16", "*fp32", "*i32"
SCALARS = ("M", "N", "K", "KW", "S", "K_PER_SPLIT", "stride_xw", "stride_xm", "stride_wn", "stride_om", "stride_qm")
CASES = [
    (w8._gemv_tokens_kernel, dict(xq_ptr=P16, sx_ptr=P32, w_ptr=I32, sw_ptr=P32, out_ptr=P16),
     dict(MT=4, BN=16, BW=64, USE_ASM=True, PDL=True, CHAIN=1, X_FLOAT=True, EPS=1e-8), 4, 1, "dp4a"),
    (w8._gemv_tokens_kernel, dict(xq_ptr=I32, sx_ptr=P32, w_ptr=I32, sw_ptr=P32, out_ptr=P16),
     dict(MT=8, BN=16, BW=32, USE_ASM=True, PDL=True, CHAIN=2, X_FLOAT=False, EPS=1e-8), 4, 1, "dp4a"),
    (w8._w8a8_kernel, dict(x_ptr="*i8", sx_ptr=P32, w_ptr="*i8", sw_ptr=P32, out_ptr=P16, ws_ptr=P32, lock_ptr=I32),
     dict(QUANT_IN_KERNEL=False, EPS=1e-8, BN=64, BM=16, BK=256, PRO_BK=1024, PDL_PREFETCH=2048, M_FAST=False, CHAIN=2,
          ROUND=1), 4, 4, "wgmma"),
    (w8._w8a8_kernel, dict(x_ptr=P16, sx_ptr=P32, w_ptr="*i8", sw_ptr=P32, out_ptr=P16, ws_ptr=P32, lock_ptr=I32),
     dict(QUANT_IN_KERNEL=True, EPS=1e-8, BN=128, BM=16, BK=256, PRO_BK=1024, PDL_PREFETCH=2048, M_FAST=False, CHAIN=1,
          ROUND=1), 4, 3, "wgmma"),
    (w8._quant_row_kernel, dict(x_ptr="*bf16", q_ptr="*i8", s_ptr=P32),
     dict(BK=16384, EPS=1e-8, EARLY=True, WAIT=True, RECIP=True, CHUNK=0), 8, 1, "cvt.rn.f32.f64"),
    (w8._quant_row_kernel, dict(x_ptr="*fp16", q_ptr="*i8", s_ptr=P32),  # "qchunk" (session 13)
     dict(BK=16384, EPS=1e-8, EARLY=True, WAIT=True, RECIP=True, CHUNK=4096), 8, 1, "cvt.rn.f32.f64"),
]
for fn, ptrs, consts, warps, stages, op in CASES:
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in fn.arg_names}
    assert all(n in consts or n in ptrs or n in SCALARS for n in fn.arg_names), fn
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages}).asm["ptx"]
    assert op in ptx and "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx, (fn, consts)
    if fn is w8._quant_row_kernel:
        assert ptx.count("div.rn.f32") == 1  # RECIP: the row's scale only, no IEEE division per element (65 without)
print("compiled", len(CASES))
"""


def test_session8_kernels_compile_for_the_h100():
    """The interpreter runs no PDL: compile the one-launch GEMV, the late trigger, the quantizing GEMM under PDL and
    the reciprocal quantizer for sm_90 here (no GPU) and check they hold the PDL instructions and their math (dp4a /
    wgmma / the fp64 -> fp32 rounding, and no fp32 division in the quantizer)."""
    compile_for_the_h100(_AOT, "compiled 6")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cfg", [dict(XF, pdl=1, chain=1), dict(XF, pdl=1, chain="late"),
                                 {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False,
                                  "waves": 1, "pdl": 2048, "chain": "late"},
                                 {"BM": 16, "BN": 128, "BK": 256, "num_warps": 4, "num_stages": 3, "fused": True,
                                  "waves": 1, "pdl": 2048, "chain": 1}], ids=["xf-chain", "xf-late", "gemm-late", "fused-pdl"])
@pytest.mark.parametrize("m", [2, 4, 16])
def test_s8_chained_calls_in_a_cuda_graph_gpu(m, cfg):
    # Layers back to back in one graph, each on the previous output, fresh activations per replay: a kernel that
    # starts early (PDL) must wait for the one before it before reading x.
    check_chained_in_a_cuda_graph(m, cfg, depth=4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 256])
@pytest.mark.parametrize("name,n,k", LLAMA_SHAPES)
def test_s8_served_path_real_shapes_gpu(name, n, k, m, dtype):
    # What w8a8_linear serves at this M (the built-in table or COMPRESS_KERNEL_CONFIGS) on every Llama-3 shape.
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < TOL[dtype]
