"""Weight-only int8 on 2:4 weights (session 17): `kernels.sparse24.sparse24_w8a16_linear` against its plain-torch
twin (Triton's CPU interpreter here, compiled on the GPU machine), its bad inputs, and the runtime's routing of a
W8A16 checkpoint's sparse24 pack (the w8a16_sparse_awq recipe) to it."""

from __future__ import annotations

import pytest
import torch

import kernels  # noqa: F401  (first: on CPU it turns Triton's interpreter on before anything imports triton)
from compress.errors import CompressError
from compress.packing.sparse24 import pack_sparse24
from kernels import sparse24 as sp

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _layer(n: int, k: int, seed: int) -> dict:
    """A random 2:4 int8 weight (two nonzeros at random positions in every group of 4) packed, with channel scales."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-127, 128, (n, k // 4, 4), generator=g, dtype=torch.int8)
    keep = torch.rand(n, k // 4, 4, generator=g).argsort(-1)[..., :2]
    w = torch.where(torch.zeros_like(w, dtype=torch.bool).scatter_(-1, keep, True), w, torch.zeros_like(w))
    packed = pack_sparse24(w.reshape(n, k))
    scale = torch.rand(n, generator=g) * 0.01 + 1e-3
    return {key: t.to(DEV) for key, t in {**packed, "w_scale": scale}.items()}


# (M, N, K): one token and a few, odd N, K a multiple of 8 (tensor-core kernel) and not (K = 132: densify + F.linear)
CASES = [(1, 64, 128), (3, 72, 256), (17, 40, 96), (1, 48, 136), (2, 64, 132)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", CASES)
def test_matches_reference(m, n, k, dtype):
    p = _layer(n, k, seed=m * 1000 + n + k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(DEV, dtype)
    y = sp.sparse24_w8a16_linear(x, p["values"], p["meta"], p["w_scale"])
    ref = sp.sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
    assert y.shape == (m, n) and y.dtype == dtype
    if k % 8 == 0:
        # The tensor-core kernel: exact int8 weights times x summed in fp32 and scaled once, so it differs from the
        # dequantized fp32 reference by the final rounding (fp16 / bf16) and the fp32 sum order.
        ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
        err = (y.float() - ref.float()).abs()
        assert (err <= ulp * ref.float().abs() + 2e-3).all(), err.max().item()
    else:
        # K = 132 (no 32-bit value words): densify + F.linear on the weight dequantized in x's dtype, with
        # dequantize-then-GEMM's rounding of every weight.
        rel = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
        assert rel < (2e-3 if dtype == torch.float16 else 1e-2), rel


def test_bias_and_leading_dims():
    p = _layer(64, 128, seed=7)
    x = torch.randn(2, 3, 128, generator=torch.Generator().manual_seed(1)).to(DEV, torch.float16)
    bias = torch.randn(64).to(DEV, torch.float16)
    y = sp.sparse24_w8a16_linear(x, p["values"], p["meta"], p["w_scale"], bias=bias)
    ref = sp.sparse24_w8a16_linear_ref(x.reshape(6, 128), p["values"], p["meta"], p["w_scale"], bias=bias).reshape(2, 3, 64)
    assert y.shape == (2, 3, 64)
    assert torch.allclose(y.float(), ref.float(), rtol=2e-3, atol=2e-3)


def test_same_inputs_same_bits():
    p = _layer(64, 256, seed=3)
    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(2)).to(DEV, torch.float16)
    a = sp.sparse24_w8a16_linear(x, p["values"], p["meta"], p["w_scale"])
    b = sp.sparse24_w8a16_linear(x, p["values"], p["meta"], p["w_scale"])
    assert torch.equal(a, b)


def test_bad_inputs_are_one_line_errors():
    p = _layer(64, 128, seed=5)
    x = torch.randn(1, 128).to(DEV, torch.float16)
    with pytest.raises(CompressError, match="values must be int8"):
        sp.sparse24_w8a16_linear(x, p["values"].to(torch.float16), p["meta"], p["w_scale"])
    with pytest.raises(CompressError, match="one scale per output channel"):
        sp.sparse24_w8a16_linear(x, p["values"], p["meta"], p["w_scale"][:10])
    with pytest.raises(CompressError, match="in_features"):
        sp.sparse24_w8a16_linear(torch.randn(1, 64).to(DEV, torch.float16), p["values"], p["meta"], p["w_scale"])


def test_config_one_token_gemv_then_tensor_cores():
    assert sp._config_w8a16(1, 4096, 4096) == dict(sp.W16_CONFIG, num_warps=8)  # session 18: 8B q/o and down
    assert sp._config_w8a16(1, 4096, 14336) == dict(sp.W16_CONFIG, num_warps=8)
    assert sp._config_w8a16(1, 8192, 28672) == sp.W16_CONFIG  # long rows
    kv = sp._config_w8a16(1, 1024, 8192)
    assert (kv["BN"], kv["BW"], kv["num_warps"]) == (4, 64, 8)  # k/v (8 warps: session 18)
    assert (sp._config_w8a16(1, 14336, 4096)["BN"], sp._config_w8a16(1, 8192, 8192)["BW"]) == (16, 16)
    big = sp._config_w8a16(1, 28672, 8192)  # 70B gate/up: 896 programs of 32 rows, one wave
    assert (big["BN"], big["BW"], big["num_warps"]) == (32, 8, 4)
    for m in (2, 16, 17, 64, 65, 1023):
        assert sp._config_w8a16(m)["kind"] == "tc"
    assert sp._config_w8a16(1024)["kind"] == "dense"  # dequantize once + cuBLAS


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cfg", [{"kind": "prmtw", "BN": 4, "BW": 2, "num_warps": 1, "split": 1},
                                 {"kind": "prmtw", "BN": 2, "BW": 4, "num_warps": 1, "split": 3},
                                 {"kind": "tc", "BM": 16, "BN": 16, "BW": 2, "num_warps": 4, "num_stages": 2}],
                         ids=["gemv", "gemv-split", "tc"])
@pytest.mark.parametrize("m,n,k", [(1, 24, 256), (2, 16, 96), (1, 13, 160)])
def test_tiles_give_the_reference(m, n, k, cfg, dtype):
    # Odd row counts, K not a multiple of the step (masked tiles), split K; the GEMV re-reads the weights per token.
    p = _layer(n, k, seed=n + k + m)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)).to(DEV, dtype)
    y = sp.sparse24_w8a16_linear_tiled(x, p["values"], p["meta"], p["w_scale"], cfg)
    ref = sp.sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
    ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
    assert ((y.float() - ref.float()).abs() <= ulp * ref.float().abs() + 2e-3).all()


# ---- runtime routing ----------------------------------------------------------------------------------------


def _plan(weights: dict):
    from torch import nn

    from compress.runtime.spec import plan_layers

    qcfg = {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"g": {"targets": ["Linear"], "weights": weights}}}
    meta = {"sparsity": {"packed": {"format": "compress.sparse24", "version": 1, "file": "sparse24.safetensors",
                                    "layers": ["proj"]}}}
    return plan_layers(qcfg, {"proj": nn.Linear(128, 64)}, meta)["proj"]


def test_w8a16_channel_pack_runs_the_24_format():
    spec = _plan({"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"})
    assert spec.format == "compress.sparse24"
    assert spec.args["base_format"] == "compressed-tensors.w8a16"


@pytest.mark.parametrize("weights", [
    {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "group", "group_size": 64},  # grouped scales
    {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "channel"},  # zero points
])
def test_other_w8a16_schemes_keep_their_compressed_tensors_path(weights):
    assert _plan(weights).format == "compressed-tensors.w8a16"


def test_w8a16_and_w8a8_24_layers_do_not_fuse():
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.fuse import fuse_outputs
    from compress.runtime.spec import LayerSpec

    p = _layer(64, 128, seed=9)

    def make(base):
        spec = LayerSpec("l", "compress.sparse24", 128, 64, False, {"version": 1, "base_format": base})
        mod = Sparse24Linear(spec, torch.float16, p["values"], p["meta"], p["w_scale"])
        mod._set_bias({}, torch.device(DEV))
        return mod

    a, b, c = make("compressed-tensors.w8a16"), make("compressed-tensors.w8a16"), make("compressed-tensors.w8a8")
    assert a.w8a16 and not a.int8 and c.int8 and not c.w8a16
    fused = fuse_outputs([a, b])
    assert fused is not None and fused.w8a16 and fused.out_features == 128
    assert fuse_outputs([a, c]) is None


def test_runtime_layer_reference_is_the_dequantized_weight():
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.spec import LayerSpec

    p = _layer(64, 128, seed=11)
    spec = LayerSpec("l", "compress.sparse24", 128, 64, False, {"version": 1, "base_format": "compressed-tensors.w8a16"})
    mod = Sparse24Linear(spec, torch.float32, p["values"].cpu(), p["meta"].cpu(), p["w_scale"].cpu())
    x = torch.randn(3, 128, dtype=torch.float64)
    want = x @ (sp.unpack_sparse24(p["values"].cpu(), p["meta"].cpu(), (64, 128)).double()
                * p["w_scale"].cpu().double()[:, None]).t()
    assert torch.allclose(mod.reference(x), want, rtol=1e-6, atol=1e-6)


# ---- the one-token GEMV's sm_90 build (no GPU needed) ---------------------------------------------------------

_AOT = """
import kernels.sparse24 as sp
from tests.sm90_build import build

n = 0
for n_rows, bf16, even in [(r, b, e) for r in (4096, 1024, 14336) for b in (False, True) for e in (True, False)]:
    cfg = sp._config_w8a16(1, n_rows, 4096)
    consts = dict(IS_BF16=bf16, USE_ASM=True, BN=cfg["BN"], BW=cfg["BW"], EVEN=even, EVICT=cfg["evict"])
    k = build(sp._sparse24_gemv_w16_kernel, consts, cfg["num_warps"])
    ptx = k.asm["ptx"]
    # the asm is in (4 value words a meta word), the weights stream evict_first, and no tile goes through shared memory
    assert ptx.count("cvt.rn.f32.s32") >= 16 and "evict_first" in ptx, (n_rows, bf16, even)
    assert ("cvt.f32.bf16" in ptx) == bf16 and k.metadata.shared <= 1024, (n_rows, bf16, even, k.metadata.shared)
    n += 1
print("compiled", n)
"""


def test_gemv_compiles_for_the_h100():
    from tests.test_kernels_w8a8 import compile_for_the_h100

    compile_for_the_h100(_AOT, "compiled 12")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (8192, 8192),
                                   (1024, 8192), (28672, 8192), (8192, 28672)], ids=str)
def test_llama_shapes_gpu(shape, dtype):
    from kernels.cases import make_sparse24, rel_err

    n, k = shape
    p = make_sparse24(n, k, torch.int8, "cuda", seed=n + k)
    for m in (1, 2, 16):
        x = torch.randn(m, k, device="cuda").to(dtype)
        got = sp.sparse24_w8a16_linear(x, p["values"], p["meta"], p["w_scale"])
        assert rel_err(got, sp.sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])) < 3e-3, m


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(16, 256), (13, 96), (40, 132)])
def test_dequantize_is_one_rounding_of_the_scaled_weight(n, k, dtype):
    # the "dequant+cublas" path's weight: int8 x channel scale in fp32, rounded once (K = 132: the reference route)
    p = _layer(n, k, seed=n * k)
    got = sp.dequantize_w8a16_sparse24(p["values"], p["meta"], k, p["w_scale"], dtype)
    want = (sp.unpack_sparse24(p["values"], p["meta"], (n, k)).float() * p["w_scale"].float()[:, None]).to(dtype)
    assert got.dtype == dtype
    if dtype == torch.bfloat16 and DEV == "cpu":  # Triton's CPU interpreter truncates fp32 -> bf16: within one unit
        assert ((got.float() - want.float()).abs() <= want.float().abs() * 2.0**-7).all()
    else:
        assert torch.equal(got, want)
    with pytest.raises(CompressError, match="one scale per row"):
        sp.dequantize_w8a16_sparse24(p["values"], p["meta"], k, p["w_scale"][:3], dtype)
