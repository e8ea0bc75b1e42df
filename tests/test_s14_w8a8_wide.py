"""Session 14: the W8A8 GEMM's tiles above 16 tokens chosen by the layer's shape (`kernels.w8a8._config_mid` for
17..64 tokens, `_config_wide` above):
the rule, the launches it makes against the plain-torch reference (interpreter on small shapes, the H100 on the
Llama-3 shapes), and that its tiles compile for sm_90 within the H100's shared memory."""

import pytest
import torch

from kernels._common import num_sms
from kernels.cases import LLAMA_SHAPES, make_w8a8
from kernels.w8a8 import WIDE_MIN_M, _config, _config_mid, _config_table, _launch, w8a8_linear, w8a8_linear_ref

from tests.test_kernels_w8a8 import DEVICE, TOL, compile_for_the_h100, rel_err

WIDE = {"BM": 128, "BN": 256, "BK": 128, "num_warps": 8, "num_stages": 4, "m_fast": True, "split": 1, "qrecip": True}


def _tiles(m, n, k, sms=132):
    cfg = _config(m, n, k, sms)
    return cfg["BM"], cfg["BN"], cfg.get("split"), cfg.get("fit")


def test_wide_rule_on_the_llama_shapes():
    # 128 x 256 tiles where they make >= 3/4 of the SMs' programs, else 64 x 128 with K split in two only past K = 8192
    want_256 = {"8B q/o_proj": (64, 128, None, 1), "8B k/v_proj": (64, 128, None, 1),
                "8B gate/up_proj": (128, 256, 1, None), "8B down_proj": (64, 128, None, 2),
                "70B q/o_proj": (64, 128, None, 1), "70B k/v_proj": (64, 128, None, 1),
                "70B gate/up_proj": (128, 256, 1, None), "70B down_proj": (64, 128, None, 2)}
    for label, n, k in LLAMA_SHAPES:
        assert _tiles(256, n, k) == want_256[label], label
        assert _tiles(1024, n, k) == ((64, 128, None, 1) if n == 1024 else (128, 256, 1, None)), label
    assert _config(256, 14336, 4096) == WIDE
    assert all(_config(256, n, k)["num_warps"] == 8 for _, n, k in LLAMA_SHAPES)


def test_wide_rule_counts_the_gpu_and_needs_the_shape():
    assert _tiles(256, 8192, 8192, sms=132)[:2] == (64, 128)  # 64 wide tiles: under 3/4 of 132 SMs
    assert _tiles(256, 8192, 8192, sms=80)[:2] == (128, 256)  # ... and over 3/4 of 80
    assert _config(256) == _config_table(256)  # no shape given: session 5's tiles
    assert _config(64) == _config_table(64)


def test_mid_rule_on_the_llama_shapes():
    # 17..64 tokens: 16-token tiles up to 32 tokens where they make <= 2 programs per SM, else 64-token tiles on 8 warps;
    # every one without split-K past one program per SM and under PDL behind a waiting quantizer
    for label, n, k in LLAMA_SHAPES:
        for m in (17, 32, 33, WIDE_MIN_M - 1):
            cfg = _config(m, n, k, 132)
            assert cfg["fit"] == 1 and cfg["qwait"] and cfg["pdl"] == 2048, (label, m)
            small = m <= 32 and n not in (14336, 28672)  # 8B / 70B gate/up: 448 / 896 programs of 16 x 64
            assert (cfg["BM"], cfg["num_warps"], cfg.get("m_fast", False)) == ((16, 4, True) if small else (64, 8, False))
    assert _config(16, 4096, 4096) == _config(16)  # 3..16 tokens: session 8's rule, shape or not


def test_tuned_file_still_overrides_the_wide_rule(tmp_path, monkeypatch):
    import json

    from kernels import _common

    cfg = {"BM": 64, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"w8a8": {"256": cfg}}))
    monkeypatch.setenv("COMPRESS_KERNEL_CONFIGS", str(path))
    monkeypatch.setattr(_common, "_TUNED", {})
    assert _config(200, 14336, 4096) == cfg


# Small shapes for the interpreter: M past one token tile and not a multiple of it, odd N, K not a multiple of BK.
SHAPES = [(130, 300, 272), (65, 40, 160), (70, 257, 144), (20, 72, 528), (33, 16, 160)]
MEDIUM = {"BM": 64, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 4, "m_fast": True, "fit": 2, "qrecip": True}


@pytest.mark.parametrize("cfg", [WIDE, MEDIUM, _config_mid(32, 1024, 132), _config_mid(64, 1024, 132)],
                         ids=["wide-128x256", "64x128-fit2", "mid-16x64", "mid-64x64"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_wide_configs_match_reference(shape, dtype, cfg):
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype) * torch.logspace(-2, 1, m, device=DEVICE)[:, None].to(dtype)
    out = _launch(x, wq, ws, cfg)
    assert out.shape == (m, n) and out.dtype == dtype
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[dtype]


def test_default_launch_above_64_tokens_takes_the_shape_rule():
    m, n, k = SHAPES[0]
    wq, ws = make_w8a8(n, k, DEVICE, seed=3)
    x = torch.randn(2, m // 2, k, device=DEVICE).half()  # leading dims flatten to M = 130
    out = w8a8_linear(x, wq, ws)
    assert out.shape == (2, m // 2, n)
    assert torch.equal(out, _launch(x, wq, ws, _config(m, n, k, num_sms(x.device))))  # the same launch, same bits
    assert not torch.equal(out, _launch(x, wq, ws, _config_table(m)))  # ... which is not session 5's (split-K partials)
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.w8a8 as w8

fn = w8._w8a8_kernel
ptrs = dict(x_ptr="*i8", sx_ptr="*fp32", w_ptr="*i8", sw_ptr="*fp16", out_ptr="*fp16", ws_ptr="*fp32", lock_ptr="*i32")
n = 0
for m, n_, k in ((256, 14336, 4096), (256, 4096, 14336), (256, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096)):
    cfg = w8._config(m, n_, k, 132)
    consts = dict(QUANT_IN_KERNEL=False, EPS=1e-8, BN=cfg["BN"], BM=cfg["BM"], BK=cfg["BK"], PRO_BK=cfg["BK"],
                  PDL_PREFETCH=cfg.get("pdl", 0), M_FAST=cfg.get("m_fast", False), CHAIN=0, ROUND=1)
    sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()})
    kern = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    assert "wgmma" in kern.asm["ptx"] and ("griddepcontrol.wait" in kern.asm["ptx"]) == bool(cfg.get("pdl")), cfg
    assert kern.metadata.shared <= 227 * 1024, (cfg, kern.metadata.shared)  # the H100's shared memory per block
    n += 1
print("compiled", n)
"""


def test_wide_tiles_compile_for_the_h100():
    compile_for_the_h100(_AOT, "compiled 5")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("m", [17, 32, 64, 65, 256, 1024])
@pytest.mark.parametrize("shape", LLAMA_SHAPES, ids=[s[0] for s in LLAMA_SHAPES])
def test_wide_rule_on_llama_shapes_gpu(shape, m):
    _, n, k = shape
    wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
    x = torch.randn(m, k, device="cuda").half()
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < TOL[torch.float16]
