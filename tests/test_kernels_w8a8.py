"""W8A8 kernels (fused per-token quant + int8 GEMM, separate quant pass) vs the plain-torch reference."""

import pytest
import torch

from compress.errors import CompressError
from kernels.cases import LLAMA_SHAPES, TEST_SHAPES_W8A8, make_w8a8
from kernels.w8a8 import _launch, quantize_per_token, quantize_per_token_ref, w8a8_linear, w8a8_linear_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float16: 3e-3, torch.bfloat16: 1.2e-2}
CONFIGS = [None, {"BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "fused": False, "split": 3},
           {"BM": 16, "BN": 32, "BK": 64, "num_warps": 4, "fused": True, "split": 2},
           {"BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "fused": False, "split": 2, "m_fast": True}]
GEMV = {"kind": "gemv", "BN": 8, "BW": 16, "num_warps": 4}
GEMV_AUTO = {"kind": "gemv", "num_warps": 4, "acc": 4}  # rows and words per step from the launcher


def rel_err(a, b):
    assert torch.isfinite(a).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "prequant-split", "fused-split", "m-fast-split"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", TEST_SHAPES_W8A8)
def test_w8a8_matches_reference(shape, dtype, cfg):
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    out = _launch(x, wq, ws, cfg)
    assert out.shape == (m, n) and out.dtype == dtype
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[dtype]


@pytest.mark.parametrize("shape", [(1, 48, 256), (3, 40, 208), (5, 64, 384), (16, 33, 128), (2, 8, 16)])
def test_few_token_gemv_is_exact(shape):
    # The dp4a GEMV computes exact int32 sums and the GEMM kernel's fp32 epilogue: the same bits as the
    # tensor-core GEMM without split-K on the same quantized activations (odd N, M not a power of two, K of one
    # word step).
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).half()
    out = _launch(x, wq, ws, GEMV)
    assert out.shape == (m, n) and torch.isfinite(out).all()
    assert torch.equal(out, _launch(x, wq, ws, GEMV_AUTO))
    gemm = {"BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "fused": False, "split": 1}  # split-K would add fp32 partials
    assert torch.equal(out, _launch(x, wq, ws, gemm))
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]


def test_few_token_gemv_rows_per_program_fill_the_gpu():
    from kernels.w8a8 import _gemv_rows

    dev = torch.device("cpu")  # the H100's 132 SMs (kernels._common's default off the GPU)
    assert _gemv_rows(14336, dev) == 16 and _gemv_rows(4096, dev) == 8 and _gemv_rows(1024, dev) == 2


def test_few_token_gemv_config_above_16_tokens_runs_the_gemm():
    wq, ws = make_w8a8(16, 64, DEVICE)
    x = torch.randn(20, 64, device=DEVICE).half()
    assert rel_err(_launch(x, wq, ws, dict(GEMV, BM=32, BN=16, BK=32)), w8a8_linear_ref(x, wq, ws)) < 3e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_quantize_per_token_matches_reference_exactly(dtype):
    x = torch.randn(7, 300, device=DEVICE).to(dtype) * torch.logspace(-3, 2, 7, device=DEVICE)[:, None].to(dtype)
    q, s = quantize_per_token(x)
    qr, sr = quantize_per_token_ref(x)
    assert torch.equal(s, sr)
    assert torch.equal(q, qr)


def test_w8a8_public_api_keeps_batch_dims_and_bias():
    wq, ws = make_w8a8(24, 64, DEVICE)
    x = torch.randn(2, 3, 64, device=DEVICE).half()
    bias = torch.randn(24, device=DEVICE).half()
    out = w8a8_linear(x, wq, ws.reshape(24, 1), bias)
    assert out.shape == (2, 3, 24)
    assert rel_err(out, w8a8_linear_ref(x, wq, ws, bias)) < 3e-3


def test_w8a8_rejects_bad_inputs():
    wq, ws = make_w8a8(16, 64, DEVICE)
    x = torch.randn(1, 64, device=DEVICE).half()
    with pytest.raises(CompressError, match="int8"):
        w8a8_linear(x, wq.half(), ws)
    with pytest.raises(CompressError, match="w_scale"):
        w8a8_linear(x, wq, ws[:3])
    with pytest.raises(CompressError, match="in_features"):
        w8a8_linear(torch.randn(1, 32, device=DEVICE).half(), wq, ws)
    with pytest.raises(CompressError, match="multiple of 16"):
        w8a8_linear(torch.randn(1, 20, device=DEVICE).half(), torch.zeros(4, 20, dtype=torch.int8, device=DEVICE), ws[:4])


def test_w8a8_opcheck():
    wq, ws = make_w8a8(16, 64, DEVICE)
    x = torch.randn(1, 64, device=DEVICE).half()
    torch.library.opcheck(torch.ops.compress.w8a8_linear, (x, wq, ws), test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 16, 64, 256])
@pytest.mark.parametrize("name,n,k", LLAMA_SHAPES[:4])
def test_w8a8_real_shapes_gpu(name, n, k, m):
    wq, ws = make_w8a8(n, k, DEVICE)
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < 3e-3


def test_quantize_per_token_long_rows_use_the_blocked_kernel():
    # K above ROW_KERNEL_MAX_K takes the two-pass blocked kernel; both must match the reference exactly.
    from kernels.w8a8 import ROW_KERNEL_MAX_K

    x = torch.randn(2, ROW_KERNEL_MAX_K + 48, device=DEVICE).half()
    q, s = quantize_per_token(x)
    qr, sr = quantize_per_token_ref(x)
    assert torch.equal(s, sr) and torch.equal(q, qr)


def test_tuned_configs_file_overrides_the_tables(tmp_path, monkeypatch):
    import json

    from kernels._common import m_bucket, tuned_config
    from kernels.w8a8 import _config

    assert [m_bucket(m) for m in (1, 2, 16, 17, 64, 65, 4096)] == [1, 16, 16, 64, 64, 256, 256]
    cfg = {"BM": 16, "BN": 32, "BK": 64, "num_warps": 4, "fused": False, "split": 2}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"w8a8": {"16": cfg}}))
    monkeypatch.setenv("COMPRESS_KERNEL_CONFIGS", str(path))
    assert _config(5) == cfg and _config(1) != cfg  # bucket 16 tuned, bucket 1 falls back to the table
    assert tuned_config("w4a16", 5) is None
    wq, ws = make_w8a8(24, 64, DEVICE)
    x = torch.randn(5, 64, device=DEVICE).half()
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < 3e-3  # the tuned config runs
    monkeypatch.setenv("COMPRESS_KERNEL_CONFIGS", str(tmp_path / "missing.json"))
    with pytest.raises(CompressError, match="COMPRESS_KERNEL_CONFIGS"):
        _config(5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("pdl", [0, 4096])
@pytest.mark.parametrize("m", [1, 9])
def test_w8a8_programmatic_dependent_launch_gpu(m, pdl):
    # The quantizer -> GEMM pair with programmatic dependent launch (weights prefetched before the wait),
    # eager and replayed from a CUDA graph with fresh activations each time.
    n, k = 14336, 4096
    wq, ws = make_w8a8(n, k, DEVICE, seed=5)
    cfg = {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "waves": 2, "pdl": pdl}
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(_launch(x, wq, ws, cfg), w8a8_linear_ref(x, wq, ws)) < 3e-3
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _launch(x, wq, ws, cfg)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < 3e-3


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.sparse24 as sp
import kernels.w8a8 as w8

P16, P32, I32 = "*fp16", "*fp32", "*i32"
SCALARS = ("M", "N", "K", "KW", "VW", "MW", "S", "K_PER_SPLIT", "WORDS_PER_SPLIT", "stride_xw", "stride_xm", "stride_wn",
           "stride_om")
CASES = [
    (w8._gemv_tokens_kernel, dict(xq_ptr=I32, sx_ptr=P32, w_ptr=I32, sw_ptr=P32, out_ptr=P16),
     dict(MT=16, BN=16, BW=16, USE_ASM=True, PDL=True, CHAIN=True, X_FLOAT=False, EPS=1e-8), 4, 1),
    (w8._w8a8_kernel, dict(x_ptr="*i8", sx_ptr=P32, w_ptr="*i8", sw_ptr=P32, out_ptr=P16, ws_ptr=P32, lock_ptr=I32),
     dict(QUANT_IN_KERNEL=False, EPS=1e-8, BN=128, BM=128, BK=128, PRO_BK=128, PDL_PREFETCH=0, M_FAST=True, CHAIN=True,
          ROUND=1), 8, 3),
    (sp._sparse24_gemv_i_kernel, dict(x_ptr=P16, sx_ptr=P32, v_ptr=I32, meta_ptr=I32, sw_ptr=P32, out_ptr=P16, ws_ptr=P32,
                                      lock_ptr=I32), dict(USE_ASM=True, BN=16, BW=8, PDL_PREFETCH=0, X_FLOAT=True, K=4096, PRO_BK=4096), 4, 1),
]
for fn, ptrs, consts, warps, stages in CASES:
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in fn.arg_names}
    assert all(n in consts or n in ptrs or n in SCALARS for n in fn.arg_names), fn
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    assert "dp4a" in k.asm["ptx"] or "wgmma" in k.asm["ptx"], fn
print("compiled", len(CASES))
"""


def test_new_int8_kernels_compile_for_the_h100():
    """The CPU interpreter accepts code the GPU compiler rejects: compile the few-token GEMV, the m_fast GEMM and
    the 2:4 int8 GEMV with in-kernel quantization for sm_90 here, without a GPU."""
    compile_for_the_h100(_AOT, "compiled 3")


def compile_for_the_h100(script: str, expect: str) -> None:
    """Run `script` (Triton ahead-of-time compiles for sm_90) in a child with the interpreter off; it must print
    `expect`. Skips where this Triton install has no ptxas."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts may import tests.* helpers
    env = {**os.environ, "TRITON_INTERPRET": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    if "ptxas" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("this Triton install has no ptxas")
    assert r.returncode == 0 and expect in r.stdout, r.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cfg", [{"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "waves": 2,
                                  "pdl": 2048, "chain": 1},
                                 {"kind": "gemv", "num_warps": 4, "pdl": 1, "chain": 1},
                                 {"kind": "gemv", "num_warps": 4, "pdl": 1},
                                 {"kind": "gemv", "num_warps": 4, "pdl": 1, "qwait": True},
                                 {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "fit": 1,
                                  "pdl": 2048, "qwait": True},
                                 {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "split": 4,
                                  "pdl": 2048, "qwait": True, "pdl_wide": 512}],  # 256 programs: pdl_wide applies
                         ids=["gemm-chain", "gemv-chain", "gemv", "gemv-qwait", "gemm-qwait", "gemm-wide"])
@pytest.mark.parametrize("m", [2, 16])
def test_w8a8_chained_calls_in_a_cuda_graph_gpu(m, cfg):
    # Calls back to back in one graph, each on the previous call's output (as layers of a model): with "chain"
    # every quantizer may start while the previous GEMM runs and must wait for it before reading its output.
    check_chained_in_a_cuda_graph(m, cfg, depth=4)


def check_chained_in_a_cuda_graph(m: int, cfg: dict, depth: int) -> None:
    """`depth` 4096 x 4096 W8A8 layers back to back in one CUDA graph, each on the previous output; every replay
    gets fresh activations and every layer's output must match the reference on its actual input."""
    n = k = 4096
    layers = [make_w8a8(n, k, DEVICE, seed=i) for i in range(depth)]
    x = torch.randn(m, k, device=DEVICE).half()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [x]
        for wq, ws in layers:
            outs.append(_launch(outs[-1], wq, ws, cfg))
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        for i, (wq, ws) in enumerate(layers):
            assert rel_err(outs[i + 1], w8a8_linear_ref(outs[i], wq, ws)) < 3e-3
