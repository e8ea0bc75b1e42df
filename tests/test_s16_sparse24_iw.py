"""Session 16: the one-token 2:4 GEMVs that gather a whole meta word (int8: 4 value words, 32 columns) or a quad of 4
groups (fp16/bf16) per asm (kernels.sparse24 `_sparse24_gemv_iw_kernel` / `_sparse24_gemv_fw_kernel`, config kind
"prmtw") -- int8: the same bits as x quantized once and the value-word GEMV; fp16/bf16: the reference's math --, their
shape rules, and their sm_90 builds (no tile through shared memory)."""

import pytest
import torch

from kernels.cases import LLAMA_SHAPES, make_sparse24
from kernels.sparse24 import FW_CONFIG, IW_CONFIG, _config, _launch, sparse24_linear_ref, sparse24_w8a8_linear_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PRMT = {"kind": "prmt", "BN": 16, "BW": 1, "num_warps": 4, "split": 1}  # the value-word GEMV, x quantized once
CONFIGS = {"split2": {"kind": "prmtw", "BN": 16, "BW": 2, "num_warps": 4, "split": 2},
           "even": {"kind": "prmtw", "BN": 8, "BW": 4, "num_warps": 4, "split": 1},
           "pdl": dict(IW_CONFIG, BW=2, split=3)}


TOL = {torch.float16: 3e-3, torch.bfloat16: 1.2e-2}
FW_CONFIGS = {"split2": {"kind": "prmtw", "BN": 16, "BQ": 2, "num_warps": 4, "split": 2},
              "even": {"kind": "prmtw", "BN": 8, "BQ": 4, "num_warps": 4, "split": 1},
              "served": dict(FW_CONFIG, BQ=2, split=3)}


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("cfg", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("shape", [(1, 48, 256), (1, 40, 200), (2, 64, 96), (1, 33, 136), (3, 20, 512)], ids=str)
def test_iw_gives_the_value_word_gemv_bits(shape, cfg):
    # odd N, K not a multiple of 32 (a partial meta word: the masked loads) or of BW meta words, split-K, 2-3 tokens
    # Unsplit, the int32 dot is exact and scaled once: the value-word GEMV's bits. Split, each split's partial is
    # scaled and the fp32 partials summed, which rounds differently: a tolerance then.
    m, n, k = shape
    p = make_sparse24(n, k, torch.int8, DEVICE, seed=n + k)
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(n * k)) * 3).half().to(DEVICE)
    got = _launch(x, p["values"], p["meta"], p["w_scale"], cfg)
    assert got.shape == (m, n) and torch.isfinite(got).all()
    old = _launch(x, p["values"], p["meta"], p["w_scale"], PRMT)
    if cfg.get("split") == 1:
        assert torch.equal(got, old)
    assert rel_err(got, old) < 1e-3
    assert rel_err(got, sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])) < 3e-3


@pytest.mark.parametrize("cfg", FW_CONFIGS.values(), ids=FW_CONFIGS.keys())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 48, 256), (1, 40, 200), (2, 64, 96), (1, 33, 136), (3, 20, 512)], ids=str)
def test_fw_matches_the_reference(shape, dtype, cfg):
    # odd N, K not a multiple of 16 (a partial quad: the masked loads), split-K, 2-3 tokens; fp32 sums in another
    # order than the value-word GEMV's, so a tolerance rather than its bits
    m, n, k = shape
    p = make_sparse24(n, k, dtype, DEVICE, seed=n + k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(n * k)).to(dtype).to(DEVICE)
    got = _launch(x, p["values"], p["meta"], None, cfg)
    assert got.shape == (m, n) and got.dtype == dtype and torch.isfinite(got).all()
    ref = sparse24_linear_ref(x, p["values"], p["meta"])
    assert rel_err(got, ref) < TOL[dtype]
    old = _launch(x, p["values"], p["meta"], None, {"kind": "prmt", "BN": 16, "BW": 1, "num_warps": 4, "split": 1})
    assert rel_err(got, old) < TOL[dtype]


def test_iw_k_not_a_multiple_of_8_takes_the_byte_gemv():
    p = make_sparse24(24, 36, torch.int8, DEVICE, seed=3)  # no whole 32-bit value words
    x = torch.randn(1, 36, device=DEVICE).half()
    got = _launch(x, p["values"], p["meta"], p["w_scale"], dict(IW_CONFIG))
    assert rel_err(got, sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])) < 3e-3


def test_iw_config_rule():
    # session 16, calls 1-4 (bench/results/h100/kernels_s16/): x quantized once under PDL, 8 rows x 32 meta words,
    # 64 meta words where K > 8192, 4 rows x 128 where N <= 2048
    assert _config(1, True) == IW_CONFIG and IW_CONFIG["kind"] == "prmtw" and IW_CONFIG["pdl"] and IW_CONFIG["qwait"]
    assert IW_CONFIG["evict"] == "evict_first"
    for n, k, bn, bw in ((4096, 4096, 8, 32), (14336, 4096, 8, 32), (8192, 8192, 8, 32), (4096, 14336, 8, 64),
                         (8192, 28672, 8, 64), (1024, 4096, 4, 128), (1024, 8192, 4, 128)):
        cfg = _config(1, True, n, k)
        assert (cfg["kind"], cfg["BN"], cfg["BW"], cfg["num_warps"]) == ("prmtw", bn, bw, 4), (n, k)
    assert _config(2, True, 4096, 4096)["kind"] == "tc"


def test_fw_config_rule():
    # session 16, call 11: 4 rows x 64 quads on 4 warps, one wave, evict_first; 128 quads where N <= 2048
    assert _config(1) == FW_CONFIG and FW_CONFIG["kind"] == "prmtw" and FW_CONFIG["evict"] == "evict_first"
    for n, k, bq in ((4096, 4096, 64), (14336, 4096, 64), (8192, 28672, 64), (1024, 4096, 128), (1024, 8192, 128)):
        cfg = _config(1, False, n, k)
        assert (cfg["kind"], cfg["BN"], cfg["BQ"], cfg["num_warps"]) == ("prmtw", 4, bq, 4), (n, k)
    assert _config(2, False, 4096, 4096)["kind"] == "tc"


_AOT = """
import kernels.sparse24 as sp
from tests.sm90_build import build

n = 0
for (rows, k), even in [(s, e) for s in ((4096, 4096), (4096, 14336), (1024, 4096)) for e in (True, False)]:
    cfg = sp._config(1, True, rows, k)
    consts = dict(USE_ASM=True, BN=cfg["BN"], BW=cfg["BW"], PDL=True, EVEN=even, EVICT=cfg["evict"])
    kern = build(sp._sparse24_gemv_iw_kernel, consts, cfg["num_warps"])
    ptx = kern.asm["ptx"]
    assert "prmt.b32 lo, " in ptx and "dp4a.s32.s32" in ptx and "griddepcontrol.wait" in ptx, (rows, k)
    assert "evict_first" in ptx, (rows, k)  # the served weight loads' L2 policy
    # every operand of the asm is loaded in the tile's own layout: only the split-K epilogue's reductions use shared
    # memory (a layout change of a tile would take BN x BW x 4 x 4 bytes or more)
    assert kern.metadata.shared <= 1024, (rows, k, even, kern.metadata.shared)
    n += 1
for (rows, k), even, bf16 in [(s, e, b) for s in ((4096, 4096), (1024, 4096)) for e in (True, False) for b in (False, True)]:
    cfg = sp._config(1, False, rows, k)  # fp16 / bf16 values
    consts = dict(USE_ASM=True, BN=cfg["BN"], BQ=cfg["BQ"], EVEN=even, EVICT=cfg["evict"], IS_BF16=bf16)
    kern = build(sp._sparse24_gemv_fw_kernel, consts, cfg["num_warps"])
    ptx = kern.asm["ptx"]
    assert "mad.lo.u32 s0, u, 0x22, 0x10101010;" in ptx and ("cvt.f32.bf16" in ptx) == bf16, (rows, k)
    assert "evict_first" in ptx and kern.metadata.shared <= 1024, (rows, k, even, bf16, kern.metadata.shared)
    n += 1
print("compiled", n)
"""


def test_iw_and_fw_compile_for_the_h100():
    from tests.test_kernels_w8a8 import compile_for_the_h100

    compile_for_the_h100(_AOT, "compiled 14")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("shape", LLAMA_SHAPES, ids=[s[0] for s in LLAMA_SHAPES])
def test_iw_llama_shapes_gpu(shape):
    _, n, k = shape
    p = make_sparse24(n, k, torch.int8, "cuda", seed=n + k)
    x = torch.randn(1, k, device="cuda").half()
    got = _launch(x, p["values"], p["meta"], p["w_scale"])  # the served config (PDL, the shape rule)
    assert torch.equal(got, _launch(x, p["values"], p["meta"], p["w_scale"], dict(PRMT, BW=8)))  # both unsplit here
    assert rel_err(got, sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])) < 3e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", LLAMA_SHAPES, ids=[s[0] for s in LLAMA_SHAPES])
def test_fw_llama_shapes_gpu(shape, dtype):
    _, n, k = shape
    p = make_sparse24(n, k, dtype, "cuda", seed=n + k)
    x = torch.randn(1, k, device="cuda").to(dtype)
    got = _launch(x, p["values"], p["meta"], None)  # the served config (the shape rule)
    assert rel_err(got, sparse24_linear_ref(x, p["values"], p["meta"])) < TOL[dtype]
