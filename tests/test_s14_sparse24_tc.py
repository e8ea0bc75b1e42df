"""Session 14: the 2:4 tensor-core GEMM that widens whole meta / value words in registers
(`kernels.sparse24._sparse24_tc_kernel`, config kind "tc") against the plain-torch references, the configs that
serve it, and its sm_90 build."""

import pytest
import torch

from kernels.cases import LLAMA_SHAPES, make_sparse24
from kernels.sparse24 import TC_CONFIG, TC_MAX_M, TC_WIDE_CONFIG, _config, _launch, sparse24_linear_ref, sparse24_w8a8_linear_ref

from tests.test_kernels_w8a8 import compile_for_the_h100

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float16: 3e-3, torch.bfloat16: 1.2e-2, torch.int8: 3e-3}
# Small tiles for the interpreter: several K steps, a split, token and weight tiles past the edges.
CONFIGS = {"split2": {"kind": "tc", "BM": 16, "BN": 32, "BW": 2, "num_warps": 4, "split": 2},
           "fit-mfast": {"kind": "tc", "BM": 32, "BN": 16, "BW": 1, "num_warps": 4, "fit": 1, "m_fast": True},
           "served": dict(TC_CONFIG, BM=16)}


def rel_err(a, b):
    assert torch.isfinite(a.float()).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def run(m, n, k, dtype, cfg, device=DEVICE, seed=1):
    p = make_sparse24(n, k, dtype, device, seed=seed)
    x = torch.randn(m, k, device=device).to(torch.float16 if dtype == torch.int8 else dtype)
    if dtype == torch.int8:
        return _launch(x, p["values"], p["meta"], p["w_scale"], cfg), sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])
    return _launch(x, p["values"], p["meta"], None, cfg), sparse24_linear_ref(x, p["values"], p["meta"])


@pytest.mark.parametrize("cfg", list(CONFIGS), ids=list(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("shape", [(20, 33, 96), (70, 72, 160), (5, 40, 288), (1, 64, 40), (3, 17, 1064)])
def test_tc_matches_reference(shape, dtype, cfg):
    # K not a multiple of a meta word (40, 1064 = 33.25 words), odd N, M across token tiles
    got, want = run(*shape, dtype, CONFIGS[cfg])
    assert got.shape == want.shape and got.dtype == want.dtype
    assert rel_err(got, want) < TOL[dtype]


def test_int8_tc_gives_the_dense_w8a8_bits():
    # the same quantized x (quantize_per_token, exact reciprocal), exact int32 sums, the same fp32 epilogue: without a
    # K split, bit for bit the dense W8A8 GEMM on the densified weight
    from kernels.sparse24 import densify_sparse24
    from kernels.w8a8 import _launch as w8a8_launch

    m, n, k = 20, 33, 96
    p = make_sparse24(n, k, torch.int8, DEVICE, seed=2)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(3)).half().to(DEVICE)
    got = _launch(x, p["values"], p["meta"], p["w_scale"], dict(TC_CONFIG, BM=16, fit=None, split=1))
    dense = w8a8_launch(x, densify_sparse24(p["values"], p["meta"], k), p["w_scale"],
                        {"BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "fused": False, "split": 1, "qrecip": True})
    assert torch.equal(got, dense)


def test_int8_tc_with_k_not_a_multiple_of_8_takes_the_expand_kernel():
    got, want = run(4, 16, 36, torch.int8, dict(TC_CONFIG, BM=16))  # no whole 32-bit value words
    assert rel_err(got, want) < TOL[torch.int8]


def test_config_rule():
    assert _config(1)["kind"] == _config(1, True)["kind"] == "prmtw"  # one token: the PRMT GEMVs (session 16)
    for m, int8 in ((2, False), (2, True), (5, True), (17, False), (TC_MAX_M, True)):
        cfg = _config(m, int8)
        assert cfg["kind"] == "tc" and cfg["BM"] == max(16, 1 << (m - 1).bit_length()), (m, int8)
        assert cfg["num_stages"] == (4 if m <= 16 else 3), (m, int8)  # session 15, call 2
    for int8 in (False, True):  # above TC_MAX_M: the tc kernel on 128 x 128 tiles (the expand kernel before)
        assert _config(TC_MAX_M + 1, int8) == _config(1024, int8) == {**TC_WIDE_CONFIG}


_AOT = """
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.sparse24 as sp

fn = sp._sparse24_tc_kernel
n = 0
# (int8 values and activations, weight-only int8 on 2:4: session 17's W8A16) per build
for (int8, w8a16), m, asm in [(v, m, a) for v in ((False, False), (True, False), (False, True)) for m in (2, 64, 256)
                              for a in (False, True)]:
    ptrs = dict(x_ptr="*i8" if int8 else "*fp16", sx_ptr="*fp32", v_ptr="*i32", meta_ptr="*i32", sw_ptr="*fp32",
                out_ptr="*fp16", ws_ptr="*fp32", lock_ptr="*i32")
    cfg = sp._config_w8a16(m) if w8a16 else sp._config(m, int8)  # 16 x 64 tiles on 4 stages, 64 x 64 (int8) /
    # 64 x 128 (fp16), 128 x 128 above 64 tokens
    consts = dict(INT8=int8, VDT=tl.int8 if int8 or w8a16 else tl.float16, DOT_F32=False, BN=cfg["BN"], BM=cfg["BM"],
                  BW=cfg["BW"], M_FAST=False, USE_ASM=asm, W8A16=w8a16)
    if not int8:
        consts.update(sx_ptr=None)
    if not int8 and not w8a16:
        consts.update(sw_ptr=None)
    sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    assert "wgmma" in k.asm["ptx"] and k.metadata.shared <= 227 * 1024, (int8, m, k.metadata.shared)
    # the PRMT widening (its selector constant) is in the GPU build only
    assert (("0x4444;" if int8 or w8a16 else "0x54545454;") in k.asm["ptx"]) == asm, (int8, w8a16, m, asm)
    n += 1
print("compiled", n)
"""


def test_tc_compiles_for_the_h100():
    compile_for_the_h100(_AOT, "compiled 18")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize("m", [2, 5, 16, 64, 256])
@pytest.mark.parametrize("shape", LLAMA_SHAPES, ids=[s[0] for s in LLAMA_SHAPES])
def test_tc_llama_shapes_gpu(shape, m, dtype):
    _, n, k = shape
    cfg = _config(m, dtype == torch.int8)
    assert cfg["kind"] == "tc"
    got, want = run(m, n, k, dtype, cfg, device="cuda", seed=n + k)
    assert rel_err(got, want) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("m", [2, 64, 256])
@pytest.mark.parametrize("shape", [(4096, 4096), (1024, 8192), (1000, 1064)], ids=str)
def test_tc_prmt_widening_gives_the_select_bits_gpu(shape, m, dtype):
    # Session 15: on the GPU `_expand_words` builds each group's columns with PRMT; the same dense tile as the
    # compare-and-select form (the interpreter's), so the same output bits
    n, k = shape
    if dtype == torch.int8 and k % 8:
        pytest.skip("int8 layers with K not a multiple of 8 take the expand kernel")
    p = make_sparse24(n, k, dtype, "cuda", seed=n + m)
    x = torch.randn(m, k, device="cuda").to(torch.float16 if dtype == torch.int8 else dtype)
    cfg = _config(m, dtype == torch.int8)
    got = _launch(x, p["values"], p["meta"], p.get("w_scale"), cfg)
    assert torch.equal(got, _launch(x, p["values"], p["meta"], p.get("w_scale"), dict(cfg, expand="select")))
