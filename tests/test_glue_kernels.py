"""The runtime's decode glue kernels (session 3): the W8A8 down projection that computes silu * up and
its int8 quantization inside the GEMV, the per-query-head attention merge, the few-row W8A16 kernel and
the int8 dequantization kernel; and the W8A8 layers whose width the int8 GEMM cannot take.

Triton runs in its CPU interpreter here (compiled on a GPU); small shapes keep it fast. The last test
compiles the changed kernels for sm_90 without a GPU."""

from __future__ import annotations

import warnings

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.errors import CompressError
from compress.runtime.spec import LayerSpec
from tests.conftest import needs_triton, w8a8_gemv_16_rows_on_cpu
from tests.conftest import triton_interpreter_works  # noqa: F401 (the skip condition names it)

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))




@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_silu_gemv_gives_the_separate_kernels_int8_result(dtype):
    """gemv_i8(silu_mul=True) quantizes silu(gate) * up itself: the same codes and scale as
    silu_mul_quant, so the output equals silu_mul_quant + the GEMV on its codes, bit for bit."""
    from compress.runtime.decode_kernels import gemv_i8, silu_mul_quant
    from compress.runtime.formats_ct import quantize_per_token_int8

    g = torch.Generator().manual_seed(11)
    n, i = 40, 200  # 50 words of 4: a masked tail in every config below
    gu = (torch.randn(1, 2 * i, generator=g) * 3).to(dtype).to(DEV)
    w = torch.randint(-127, 128, (n, i), generator=g, dtype=torch.int8).to(DEV)
    ws = (torch.rand(n, generator=g) * 0.01 + 1e-3).to(DEV)
    a, (aq, as_) = silu_mul_quant(gu)
    # Against torch in fp16 (the CPU interpreter truncates fp32 -> bf16 instead of rounding; the GPU rounds).
    ref_a = (torch.nn.functional.silu(gu[:, :i].float()) * gu[:, i:].float()).to(dtype)
    rq, rs = quantize_per_token_int8(a)
    if dtype == torch.float16 or DEV == "cuda":
        assert torch.equal(a, ref_a)
    assert torch.equal(aq, rq) and torch.equal(as_, rs.reshape(-1).float())
    for cfg in [(16, 16, 4), (8, 32, 4)]:
        sep = gemv_i8(aq, as_, w, ws, dtype, cfg)
        fused = gemv_i8(gu, None, w, ws, dtype, cfg, silu_mul=True)
        assert torch.equal(fused, sep), cfg
    exact = (rq.double() @ w.double().t()) * rs.double() * ws.double()  # (1, N)
    assert _rel(fused, exact) < (2e-3 if dtype == torch.float16 else 8e-3)  # one rounding to the output dtype


@needs_triton
@pytest.mark.parametrize("x_float", [False, True], ids=["int8-codes", "fp16-quantized-inside"])
def test_int8_gemv_is_exact_over_tile_tails(x_float):
    """The int8 GEMV's weight tiles are double-buffered (tile i + 1 loaded while tile i is summed): every
    tiling, with K and N cut into partial tiles or into one tile only, gives the exact integer dot
    products, scaled in fp32 as the reference (kernels/w8a8.py) scales them."""
    from compress.runtime.decode_kernels import gemv_i8
    from compress.runtime.formats_ct import quantize_per_token_int8

    g = torch.Generator().manual_seed(21)
    for n, k in ((40, 200), (16, 64), (9, 12)):  # 50, 16 and 3 words of 4
        w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
        ws = torch.rand(n, generator=g) * 0.01 + 1e-3
        x = (torch.randn(1, k, generator=g) * 3).half()
        xq, xs = quantize_per_token_int8(x)
        xs = xs.reshape(1).float()
        exact = ((xq.long() @ w.long().t()).float() * ws * xs).half()  # int32 sums, then the fp32 scaling
        for cfg in [(16, 16, 4), (8, 32, 4), (32, 4, 2), (16, 64, 4)]:
            args = (x, None) if x_float else (xq, xs)
            y = gemv_i8(args[0].to(DEV), None if args[1] is None else args[1].to(DEV), w.to(DEV), ws.to(DEV),
                        torch.float16, cfg)
            assert torch.equal(y.cpu(), exact), (n, k, cfg)


@needs_triton
@pytest.mark.parametrize("silu_mul", [False, True])
def test_fp16_gemv_over_tile_tails(silu_mul):
    """The fp16 GEMV double-buffers its weight tiles like the int8 one: K cut into several partial tiles,
    or one, still gives x @ W^T (x = silu(gate) * up, rounded to fp16, with silu_mul)."""
    from compress.runtime.decode_kernels import gemv

    g = torch.Generator().manual_seed(22)
    for n, k in ((40, 200), (9, 24)):
        w = (torch.randn(n, k, generator=g) * 0.1).half()
        x = torch.randn(1, 2 * k if silu_mul else k, generator=g).half()
        a = (torch.nn.functional.silu(x[:, :k].float()) * x[:, k:].float()).half() if silu_mul else x
        ref = a.double() @ w.double().t()
        for cfg in [(16, 16, 4), (8, 32, 4), (16, 64, 4)]:
            y = gemv(x.to(DEV), w.to(DEV), cfg, silu_mul=silu_mul)
            assert _rel(y.cpu(), ref) < 2e-3, (n, k, cfg)


try:  # a test-only kernel around the runtime's quantization helper (module level: Triton resolves globals)
    import triton
    import triton.language as tl

    from compress.runtime import decode_kernels as _dk

    @triton.jit
    def _codes_probe(v_ptr, d_ptr, q_ptr, s_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        v = tl.load(v_ptr + offs, mask=m, other=0.0)
        inv_s = 1.0 / tl.load(s_ptr).to(tl.float64)
        tl.store(d_ptr + offs, _dk._quotient(v, inv_s), mask=m)
        tl.store(q_ptr + offs, _dk._int8_codes(v, inv_s), mask=m)
except ImportError:  # no triton: the tests that need it skip
    _codes_probe = None


@needs_triton
def test_int8_codes_equal_the_fp32_division_for_every_fp16_value():
    """The kernels quantize with v * (1 / s) in fp64 instead of an fp32 division per element: for every
    finite fp16 value and scales s = max|x| / 127 of many magnitudes, the quotient is the fp32 division's
    and the codes are the reference's clamp(round(v / s)) (ties to even), bit for bit."""
    v16 = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    v = v16[torch.isfinite(v16)].float()
    g = torch.Generator().manual_seed(23)
    amax = v.abs()[torch.randint(0, v.numel(), (12,), generator=g)].clamp_min(1e-8)
    scales = torch.cat([amax / 127, torch.tensor([1e-8 / 127, 1.0 / 127, 3.0, 1e-3 / 127])]).float()
    for s in scales.tolist():
        s32 = torch.tensor([s], dtype=torch.float32)
        d, q = torch.empty_like(v).to(DEV), torch.empty_like(v).to(DEV)
        _codes_probe[(-(-v.numel() // 65536),)](v.to(DEV), d, q, s32.to(DEV), N=v.numel(), BLOCK=65536)
        assert torch.equal(d.cpu(), v / s32), s
        assert torch.equal(q.cpu(), torch.round(v / s32).clamp(-127, 127)), s


def test_pdl_is_off_without_a_hopper_gpu(monkeypatch):
    """Programmatic dependent launch is a Hopper feature and an A/B switch: never on a CPU (the
    interpreter runs no griddepcontrol), and off on any device with COMPRESS_DECODE_PDL=0."""
    from compress.runtime.decode_kernels import _pick, pdl_enabled

    assert not pdl_enabled(torch.device("cpu"))
    assert _pick("plain", "pdl", torch.device("cpu")) == ("plain", {})
    if torch.cuda.is_available():
        monkeypatch.setenv("COMPRESS_DECODE_PDL", "0")
        assert not pdl_enabled(torch.device("cuda"))
        monkeypatch.setenv("COMPRESS_DECODE_PDL", "1")
        assert pdl_enabled(torch.device("cuda")) == (torch.cuda.get_device_capability() >= (9, 0))


@needs_triton
def test_fast_path_w8a8_down_candidates_agree(monkeypatch):
    """FastLM's one-token W8A8 down projection offers the separate and the fused silu paths; every
    candidate gives the same logits (run through a table that executes them all)."""
    from test_runtime_fastpath import _EveryPath, _tiny

    from compress.runtime import fastpath
    from compress.runtime.formats_ct import CTW8A8Linear
    from kernels.w8a8 import quantize_weight_per_channel

    w8a8_gemv_16_rows_on_cpu(monkeypatch)
    model = _tiny("llama").half().to(DEV)
    for layer in model.model.layers:  # every Linear of the blocks -> W8A8 on the kernel backend
        for parent, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                              (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
            for nm in names:
                lin = getattr(parent, nm)
                q, s = quantize_weight_per_channel(lin.weight.data)
                spec = LayerSpec(nm, "compressed-tensors.w8a8", lin.in_features, lin.out_features)
                mod = CTW8A8Linear.from_checkpoint(spec, {"weight": q, "weight_scale": s[:, None]},
                                                   device=torch.device(DEV), dtype=torch.float16)
                mod.use_kernel()
                setattr(parent, nm, mod)
    every = _EveryPath(tol=2e-2, pick=-1)
    monkeypatch.setattr(fastpath, "TABLE", every)
    ids = torch.randint(0, 300, (1, 5), generator=torch.Generator().manual_seed(3)).to(DEV)
    lm = fastpath.FastLM(model, 1, 8, attn_kernel=True, prequant=True)
    tok = lm.prefill(ids).argmax(-1, keepdim=True)
    lm.decode(tok)
    assert "w8a8_silu_down" in every.keys


@needs_triton
def test_attention_merge_reads_partials_in_several_blocks():
    """The combine step reads the chunk partials BLOCK_S at a time; with fewer lanes than chunks its
    loop runs several times and must give the same attention."""
    from compress.runtime.decode_kernels import DecodeAttention, attention_reference

    g = torch.Generator().manual_seed(12)
    b, h, hkv, d, length = 1, 4, 2, 16, 80
    att = DecodeAttention(b, h, hkv, d, length, torch.device(DEV), target_programs=10, block_l=16)
    assert att.splits == 5
    att.block_s = 2  # 5 chunks in 3 blocks of 2 (the last one half masked)
    kc = torch.randn(b, hkv, length, d, generator=g).half().to(DEV)
    vc = torch.randn(b, hkv, length, d, generator=g).half().to(DEV)
    kc_ref, vc_ref = kc.clone(), vc.clone()
    q = torch.randn(b, h * d, generator=g).half().to(DEV)
    k, v = (torch.randn(b, hkv * d, generator=g).half().to(DEV) for _ in range(2))
    ang = torch.rand(d // 2, generator=g)
    cos, sin = torch.cat([ang, ang]).cos().half().to(DEV), torch.cat([ang, ang]).sin().half().to(DEV)
    for pos in (0, 33, 79):
        out = att(q, k, v, cos, sin, kc, vc, torch.tensor(pos, device=DEV), 0.25)
        ref = attention_reference(q, k, v, cos, sin, kc_ref, vc_ref, pos, 0.25)
        assert _rel(out, ref) < 2e-3, (pos, _rel(out, ref))
        assert torch.equal(vc[:, :, pos], vc_ref[:, :, pos]) and _rel(kc[:, :, pos], kc_ref[:, :, pos]) < 2e-3


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_few_row_w8a16_kernel_matches_reference(dtype):
    from compress.runtime.decode_kernels import GEMM_W8_CONFIGS, GEMV_W8_CONFIGS, gemm_w8, gemm_w8_fits, gemv_w8

    if dtype == torch.bfloat16 and DEV == "cpu":
        pytest.skip("Triton's CPU interpreter multiplies bf16 tl.dot operands as raw bits (GPU only)")
    g = torch.Generator().manual_seed(13)
    for n, k, gs in [(40, 256, 32), (33, 256, 128)]:  # N not a multiple of any BLOCK_N
        q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8).to(DEV)
        s = (torch.rand(n, k // gs, generator=g) * 0.01).to(dtype).to(DEV)
        w = q.float() * s.float().repeat_interleave(gs, 1)
        for m in (1, 3, 16, 17, 40, 64):  # row tiles of 16, 32 and 64
            x = torch.randn(m, k, generator=g).to(dtype).to(DEV)
            ref = x.float() @ w.t()
            for cfg in (GEMM_W8_CONFIGS[0], (32, 4, 2, 1), (16, 4, 2, 2), (32, 4, 2, 4)):  # 1, 2, 4 K splits
                if not gemm_w8_fits(k, gs, cfg):  # K = 256 in groups of 128: two column tiles, no 4-way split
                    continue
                y = gemm_w8(x, q, s, gs, cfg)
                assert y.dtype == dtype and y.shape == (m, n) and _rel(y, ref) < 4e-3, (n, m, cfg, _rel(y, ref))
        x1 = torch.randn(1, k, generator=g).to(dtype).to(DEV)
        for cfg in GEMV_W8_CONFIGS[:2]:
            assert _rel(gemv_w8(x1, q, s, gs, cfg), x1.float() @ w.t()) < 4e-3


@needs_triton
@pytest.mark.parametrize("zero", [False, True])
def test_dequant_kernel_is_bit_identical_to_torch(zero):
    from compress.runtime.decode_kernels import dequant_w8
    from compress.runtime.formats_ct import _dequant_weight_only

    g = torch.Generator().manual_seed(14)
    n, k, groups = 37, 300, 3  # groups of 100 columns: not a power of two, the last block masked
    q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8).to(DEV)
    s = (torch.rand(n, groups, generator=g) * 0.02).half().to(DEV)
    z = torch.randint(-8, 8, (n, groups), generator=g, dtype=torch.int8).to(DEV) if zero else None
    # bf16 on the GPU only: the CPU interpreter truncates fp32 -> bf16 instead of rounding to nearest.
    for dt in (torch.float16, torch.bfloat16) if DEV == "cuda" else (torch.float16,):
        assert torch.equal(dequant_w8(q, s, z, dt), _dequant_weight_only(q, s, z, k, dt))


@needs_triton
def test_w8a16_layer_offers_the_few_row_kernel_and_every_path_agrees():
    from compress.runtime import kernel_bridge as kb
    from compress.runtime.formats_ct import CTW8A16Linear

    g = torch.Generator().manual_seed(15)
    n, k = 48, 256
    spec = LayerSpec("l", "compressed-tensors.w8a16", k, n, args={"group_size": 128, "strategy": "group"})
    q = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    s = (torch.rand(n, 2, generator=g) * 0.01).half()
    mod = CTW8A16Linear.from_checkpoint(spec, {"weight": q, "weight_scale": s}, device=torch.device(DEV),
                                        dtype=torch.float16)
    with kb.allow_interpreter():
        assert CTW8A16Linear.kernel_unavailable(torch.device(DEV), spec) is None
    mod.use_kernel()
    for m, first in ((1, "gemv_w8"), (3, "gemm_w8"), (16, "gemm_w8"), (20, "gemm_w8"), (64, "gemm_w8"),
                     (65, "dequant+cublas")):
        x = torch.randn(m, k, generator=g).half().to(DEV)
        ref = mod.reference(x)
        paths = mod.kernel_paths(x)
        assert paths[0][0].startswith(first), (m, [p for p, _ in paths])
        assert any(p == "dequant+cublas" for p, _ in paths)
        # the tiled GEMM (compress/runtime/w8a16_prefill.py) from 17 rows
        assert any(p.startswith("gemm_w8_tiled") for p, _ in paths) == (m >= 17), (m, [p for p, _ in paths])
        for name, fn in paths:
            assert _rel(fn(), ref) < 4e-3, (m, name)


def _w8a8_layer(k: int, n: int = 24):
    from compress.runtime.formats_ct import CTW8A8Linear

    g = torch.Generator().manual_seed(k)
    spec = LayerSpec(f"model.layers.0.mlp.down_proj_{k}", "compressed-tensors.w8a8", k, n)
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    s = torch.rand(n, 1, generator=g) * 0.01 + 1e-3
    return CTW8A8Linear.from_checkpoint(spec, {"weight": q, "weight_scale": s}, device=torch.device(DEV),
                                        dtype=torch.float16)


@needs_triton
def test_w8a8_width_the_int8_gemm_cannot_take_runs_and_says_so():
    """stories260K's intermediate size 172 is not a multiple of 16 (kernels/w8a8.py raised on it): the
    layer stays on the kernel backend with the int8 GEMV at one token and the reference otherwise, and
    the load warns; a width that is not a multiple of 4 has no kernel at all."""
    from compress.runtime.loader import ReferenceFallbackWarning, RuntimeInfo, choose_backends

    odd, ok = _w8a8_layer(172), _w8a8_layer(160)
    info = RuntimeInfo("x", DEV, "float16")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        choose_backends({odd.spec.name: odd, ok.spec.name: ok}, torch.device(DEV), "kernel", info)
    msgs = [str(w.message) for w in got if issubclass(w.category, ReferenceFallbackWarning)]
    assert len(msgs) == 1 and "1 layer(s)" in msgs[0] and "in_features=172" in msgs[0], msgs
    assert odd.backend == ok.backend == "kernel"
    g = torch.Generator().manual_seed(16)
    for m in (1, 3):
        x = torch.randn(m, 172, generator=g).half().to(DEV)
        names = [p for p, _ in odd.kernel_paths(x)]
        assert "kernel" not in names and (names[0].startswith("gemv_i8") if m == 1 else names == ["reference"])
        ref = odd.reference(x)
        for _, fn in odd.kernel_paths(x):
            assert _rel(fn(), ref) < 2e-3
        assert _rel(odd(x), ref) < 2e-3
    assert "kernel" in [p for p, _ in ok.kernel_paths(torch.randn(3, 160).half().to(DEV))]

    bad = _w8a8_layer(170)
    with pytest.raises(CompressError, match="in_features=170"):
        choose_backends({bad.spec.name: bad}, torch.device(DEV), "kernel", RuntimeInfo("x", DEV, "float16"))


_AOT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import compress.runtime.decode_kernels as dk

P16, P32 = "*fp16", "*fp32"
CASES = [
    (dk._gemv_i8, dict(xq_ptr=P16, xs_ptr=P32, w_ptr="*i32", ws_ptr=P32, y_ptr=P16, N="i32"),
     dict(KW=3584, BLOCK_N=16, BLOCK_W=512, USE_ASM=True, X_FLOAT=True, SILU=True), 8, 1),
    # The PDL twins (griddepcontrol: sm_90 only) of every kernel a W8A8 decode step launches.
    (dk._gemv_i8_pdl, dict(xq_ptr=P16, xs_ptr=P32, w_ptr="*i32", ws_ptr=P32, y_ptr=P16, N="i32"),
     dict(KW=3584, BLOCK_N=16, BLOCK_W=512, USE_ASM=True, X_FLOAT=True, SILU=True), 8, 1),
    (dk._gemv_i8_pdl, dict(xq_ptr="*i32", xs_ptr=P32, w_ptr="*i32", ws_ptr=P32, y_ptr=P16, N="i32"),
     dict(KW=1024, BLOCK_N=32, BLOCK_W=128, USE_ASM=True, X_FLOAT=False, SILU=False), 4, 3),
    (dk._add_rms_norm_pdl, dict(x_ptr=P16, y_ptr=P16, w_ptr=P16, s_ptr=P16, h_ptr=P16, q_ptr="*i8", qs_ptr=P32,
                                eps="fp32"), dict(N=4096, BLOCK=4096, HAS_Y=True, QUANT=True), 8, 3),
    (dk._gemv_pdl, dict(x_ptr=P16, w_ptr=P16, y_ptr=P16, N="i32"), dict(K=4096, BLOCK_N=8, BLOCK_K=512, SILU_MUL=False),
     4, 3),
    (dk._attn_split_pdl, dict(q_ptr=P16, stride_qb="i32", cos_ptr=P16, sin_ptr=P16, qn_ptr=P16, eps="fp32",
                              kc_ptr=P16, vc_ptr=P16, pos_ptr="*i64", pm_ptr=P32, pl_ptr=P32, pacc_ptr=P32,
                              scale_log2="fp32"),
     dict(HKV=8, G=4, D=128, L=768, S=12, CHUNK=64, BLOCK_G=16, HAS_NORM=False, BLOCK_D=128, BLOCK_L=64), 4, 2),
    (dk._attn_combine_pdl, dict(q_ptr=P16, k_ptr=P16, v_ptr=P16, stride_qb="i32", stride_kb="i32", stride_vb="i32",
                                cos_ptr=P16, sin_ptr=P16, qn_ptr=P16, kn_ptr=P16, eps="fp32", kc_ptr=P16, vc_ptr=P16,
                                pos_ptr="*i64", pm_ptr=P32, pl_ptr=P32, pacc_ptr=P32, out_ptr=P16, scale_log2="fp32"),
     dict(HKV=8, G=4, D=128, L=768, S=12, HAS_NORM=False, BLOCK_D=128, BLOCK_S=16), 4, 3),
    (dk._gemm_w8, dict(x_ptr=P16, q_ptr="*i8", s_ptr=P16, y_ptr=P16, M="i32", N="i32", stride_xm="i32"),
     dict(K=4096, G=32, GS=128, BLOCK_M=16, BLOCK_N=32, BK=128, K_PER=4096, SPLIT=False), 4, 4),
    (dk._gemm_w8, dict(x_ptr="*bf16", q_ptr="*i8", s_ptr="*bf16", y_ptr=P32, M="i32", N="i32", stride_xm="i32"),
     dict(K=14336, G=112, GS=128, BLOCK_M=16, BLOCK_N=64, BK=128, K_PER=1792, SPLIT=True), 4, 3),
    (dk._gemm_w8, dict(x_ptr=P16, q_ptr="*i8", s_ptr=P16, y_ptr=P16, M="i32", N="i32", stride_xm="i32"),
     dict(K=4096, G=32, GS=128, BLOCK_M=64, BLOCK_N=32, BK=128, K_PER=4096, SPLIT=False), 8, 6),
    (dk._dequant_w8, dict(q_ptr="*i8", s_ptr=P16, z_ptr="*i8", w_ptr=P16, N="i32", K="i32", G="i32", GS="i32"),
     dict(HAS_ZERO=True, BLOCK_N=32, BLOCK_K=256), 4, 1),
    (dk._gemv_w8, dict(x_ptr=P16, q_ptr="*i8", s_ptr=P16, y_ptr=P16, N="i32"),
     dict(K=14336, G=112, GS=128, BLOCK_N=32, NG=8), 8, 1),
]
for fn, types, consts, warps, stages in CASES:
    sig = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    if fn.__name__.endswith("_pdl"):  # the launch hooks are really in the code
        assert "griddepcontrol.wait" in k.asm["ptx"] and "griddepcontrol.launch_dependents" in k.asm["ptx"], fn
print("compiled", len(CASES))
"""


def test_glue_kernels_compile_for_the_h100():
    """The CPU interpreter accepts code the GPU compiler rejects: compile the kernels of this file for
    sm_90 here, without a GPU (the attention merge is compiled by test_runtime_fastpath's twin)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", _AOT], capture_output=True, text=True, env=env, timeout=300)
    if "ptxas" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("this Triton install has no ptxas")
    assert r.returncode == 0 and "compiled 12" in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_decode_rope_table_rows_equal_the_rotary_module(model_type):
    """FastLM gathers a decode step's cos/sin from a table made once; every row is what the model's
    rotary module gives for that single position."""
    from test_runtime_fastpath import _tiny

    from compress.runtime.fastpath import FastLM

    model = _tiny(model_type)
    lm = FastLM(model, 1, 12, attn_kernel=False)
    assert lm.rope_table is not None and lm.rope_table.shape == (1, 12, 2, lm.head_dim)
    x = torch.zeros(1, 1, model.config.hidden_size)
    for p in (0, 5, 11):
        cos, sin = lm.rotary(x, torch.tensor([[p]]))
        assert torch.equal(lm.rope_table[:, p, 0], cos[:, 0]) and torch.equal(lm.rope_table[:, p, 1], sin[:, 0])


def test_greedy_argmax_matches_torch_argmax_ties_included():
    from compress.runtime.generate import greedy_argmax

    g = torch.Generator().manual_seed(0)
    for v in (128256, 151936, 32000, 50257, 1000):  # Llama-3, Qwen3, Llama-2, GPT-2 (no power-of-two chunk), tiny
        x = torch.randn(3, v, generator=g).half()
        x[1, v // 3] = x[1, v - 5] = 20.0  # a tie: the first index wins in both
        x[2, :] = 0.0  # all equal
        got = greedy_argmax(x)
        assert got.shape == (3, 1) and torch.equal(got, x.argmax(-1, keepdim=True)), v
    assert greedy_argmax(torch.tensor([[0.0, 1.0, 1.0]])).item() == 1
