"""Session 9: decode attention as one launch (compress/runtime/decode_kernels._attn_fused: the last program of a kv
head merges the chunk partials), against the plain-torch reference and the two-launch kernels."""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.errors import CompressError
from compress.runtime import decode_kernels as dk

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def _case(g, b, h, hkv, d, length):
    kc = torch.randn(b, hkv, length, d, generator=g).half().to(DEV)
    vc = torch.randn(b, hkv, length, d, generator=g).half().to(DEV)
    qkv = torch.randn(b, (h + 2 * hkv) * d, generator=g).half().to(DEV)
    q, k, v = qkv.split([h * d, hkv * d, hkv * d], dim=1)  # strided views, as the fused projection gives
    ang = torch.rand(d // 2, generator=g)
    cos, sin = torch.cat([ang, ang]).cos().half().to(DEV), torch.cat([ang, ang]).sin().half().to(DEV)
    return kc, vc, q, k, v, cos, sin


@pytest.mark.parametrize("qk_norm,d,h,hkv", [(False, 16, 6, 2), (True, 16, 6, 2), (False, 8, 4, 4), (False, 32, 8, 1)])
def test_fused_attention_matches_reference_and_resets_its_counters(monkeypatch, qk_norm, d, h, hkv):
    monkeypatch.setenv("COMPRESS_DECODE_ATTN", "fused")
    g = torch.Generator().manual_seed(d + h)
    b, length = 2, 70
    att = dk.DecodeAttention(b, h, hkv, d, length, torch.device(DEV), target_programs=4 * b * hkv, block_l=16)
    assert att.mode == "fused" and att.splits > 1  # several chunks: the merge is exercised
    kc, vc, q, k, v, cos, sin = _case(g, b, h, hkv, d, length)
    kc_ref, vc_ref = kc.clone(), vc.clone()
    qn = (1 + 0.2 * torch.randn(d, generator=g)).half().to(DEV) if qk_norm else None
    kn = (1 + 0.2 * torch.randn(d, generator=g)).half().to(DEV) if qk_norm else None
    for pos in (0, 5, 15, 16, 47, 69):  # empty cache, inside / at the edge of a chunk, last slot
        out = att(q, k, v, cos, sin, kc, vc, torch.tensor(pos, device=DEV), 0.3, qn, kn, 1e-6)
        ref = dk.attention_reference(q, k, v, cos, sin, kc_ref, vc_ref, pos, 0.3, qn, kn, 1e-6)
        assert _rel(out, ref) < 2e-3, (pos, _rel(out, ref))
        assert _rel(kc[:, :, pos], kc_ref[:, :, pos]) < 2e-3 and torch.equal(vc[:, :, pos], vc_ref[:, :, pos])
        assert torch.equal(kc[:, :, pos + 1:], kc_ref[:, :, pos + 1:])  # nothing else written
        assert not att.done.any()  # the last program of each kv head put its counter back


def test_fused_and_split_launches_agree(monkeypatch):
    g = torch.Generator().manual_seed(3)
    b, h, hkv, d, length = 1, 8, 2, 16, 96
    kc, vc, q, k, v, cos, sin = _case(g, b, h, hkv, d, length)
    outs = {}
    for mode in ("split", "fused"):
        monkeypatch.setenv("COMPRESS_DECODE_ATTN", mode)
        att = dk.DecodeAttention(b, h, hkv, d, length, torch.device(DEV), target_programs=12, block_l=16)
        kcm, vcm = kc.clone(), vc.clone()
        outs[mode] = [att(q, k, v, cos, sin, kcm, vcm, torch.tensor(pos, device=DEV), 0.25) for pos in (31, 95)]
        outs[mode + "_cache"] = (kcm, vcm)
    for a, b_ in zip(outs["split"], outs["fused"]):
        assert _rel(a, b_) < 1e-3
    assert torch.equal(outs["split_cache"][1], outs["fused_cache"][1])
    assert _rel(outs["split_cache"][0], outs["fused_cache"][0]) < 1e-3


def test_attention_mode_setting_refuses_bad_values_with_the_fix(monkeypatch):
    monkeypatch.setenv("COMPRESS_DECODE_ATTN", "one")
    with pytest.raises(CompressError, match="COMPRESS_DECODE_ATTN='one' is not split or fused"):
        dk.decode_attn_mode()
    monkeypatch.delenv("COMPRESS_DECODE_ATTN")
    assert dk.decode_attn_mode() == dk.DECODE_ATTN_DEFAULT


_AOT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import compress.runtime.decode_kernels as dk

P16, P32 = "*fp16", "*fp32"
fused = dict(q_ptr=P16, k_ptr=P16, v_ptr=P16, stride_qb="i32", stride_kb="i32", stride_vb="i32", cos_ptr=P16,
             sin_ptr=P16, qn_ptr=P16, kn_ptr=P16, eps="fp32", kc_ptr=P16, vc_ptr=P16, pos_ptr="*i64", pm_ptr=P32,
             pl_ptr=P32, pacc_ptr=P32, cnt_ptr="*i32", out_ptr=P16, scale_log2="fp32")
CASES = [(dk._attn_fused_pdl, fused, dict(HKV=8, G=4, D=128, L=768, S=12, CHUNK=64, BLOCK_G=16, BLOCK_L=64,
                                            HAS_NORM=True, BLOCK_D=128), 4, 2),
         (dk._silu_mul_pdl, dict(gu_ptr=P16, a_ptr=P16), dict(I=14336, BLOCK=1024), 4, 1)]
for fn, types, consts, warps, stages in CASES:
    sig = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages}).asm["ptx"]
    assert "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx, fn
    if fn is dk._attn_fused_pdl:  # the count releases the partials, the merge reads them past L1
        assert "atom.global.gpu.acq_rel.add" in ptx and "ld.global.cg" in ptx, "ordering instructions missing"
print("compiled", len(CASES))
"""


def test_fused_attention_and_silu_compile_for_the_h100():
    """The CPU interpreter accepts code the GPU compiler rejects: compile the session-9 kernels for sm_90 here."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", _AOT], capture_output=True, text=True, env=env, timeout=300)
    if "ptxas" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("this Triton install has no ptxas")
    assert r.returncode == 0 and "compiled 2" in r.stdout, r.stderr[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fast engine's decode kernels on a GPU")
def test_fast_engine_decode_with_fused_attention_in_cuda_graphs(monkeypatch):
    """Generator (CUDA graphs for prefill and decode) on a tiny W4A16 Llama: the fused attention's tokens and last
    logits match the two-launch kernels'."""
    from compress.bench import e2e_synthetic as syn
    from compress.runtime.generate import Generator

    monkeypatch.setitem(syn.ARCHS, "s9-attn", dict(
        model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=300, max_position_embeddings=256, rms_norm_eps=1e-5,
        tie_word_embeddings=False, hidden_act="silu", attention_bias=False, mlp_bias=False))
    model = syn.build_synthetic("s9-attn", "w4a16", "cuda", seed=0)
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(1)).cuda()
    tokens = {}
    for mode in ("split", "fused"):
        monkeypatch.setenv("COMPRESS_DECODE_ATTN", mode)
        gen = Generator(model, 1, 40, 24, engine="fast")
        gen.warmup(ids)
        assert gen.g_decode is not None and gen.engine.lm.attn.mode == mode
        tokens[mode] = gen.run(ids).tokens
    assert torch.equal(tokens["split"], tokens["fused"])
