"""Decode attention with the new token in the split launch (session 11): `DecodeAttention(new_token="split")`
= `partials` (chunk 0's program scores the new token and writes its k/v) + `merge_partials` (a pure merge
that a GEMV can later fold into its input staging). It must give the "combine" mode's output and caches.

Triton runs in its CPU interpreter here (compiled on a GPU); small shapes keep it fast. The last test
compiles the new kernels for sm_90 without a GPU."""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from tests.conftest import needs_triton, triton_interpreter_works  # noqa: F401 (the skip condition names it)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NEG = -1.0e30  # an empty chunk's running max (decode_kernels.NEG)
LENGTH, BLOCK_L = 60, 16  # with target_programs = 4 * B * Hkv: 4 chunks of 16, the last one 12 long
CHUNK = 16
# Relative error vs the fp32 references, as test_runtime_fastpath (2e-3 for fp16; fp32: exact on a CPU,
# TF32 dots on a GPU).
REF_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 2e-3 if DEV == "cuda" else 1e-5}
# Triton 3.6's CPU interpreter computes tl.dot on bf16 operands wrong (2.4e10 off on a 16x16 randn product, the
# "combine" mode included): bf16 runs on a GPU only.
GPU_ONLY = pytest.mark.skipif(DEV != "cuda", reason="the Triton interpreter's tl.dot is wrong for bf16")


def _rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _attention(b, hkv, g, d, new_token):
    from compress.runtime.decode_kernels import DecodeAttention

    att = DecodeAttention(b, hkv * g, hkv, d, LENGTH, torch.device(DEV), target_programs=4 * b * hkv,
                          block_l=BLOCK_L, new_token=new_token)
    assert (att.splits, att.chunk) == (4, CHUNK)
    return att


def _inputs(b, hkv, g, d, dtype, qk_norm, seed):
    """Caches (random: every position < pos counts), the optional q/k norm weights, and `token()`: a new
    token's q/k/v (strided views of one fused projection row) and cos/sin, fresh at each call (a token
    already in the cache would tie its chunk's maximum and hide a missing rescale)."""
    gen = torch.Generator().manual_seed(seed)
    h = hkv * g

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(dtype).to(DEV)

    def token():
        q, k, v = rnd(b, (h + 2 * hkv) * d).split([h * d, hkv * d, hkv * d], dim=1)
        ang = torch.rand(d // 2, generator=gen) * 6
        cos, sin = torch.cat([ang, ang]).cos().to(dtype).to(DEV), torch.cat([ang, ang]).sin().to(dtype).to(DEV)
        return q, k, v, cos, sin

    # Cached keys 4x smaller than the new one: the new token often holds its chunk's maximum, so folding it
    # in must rescale the chunk's cached sums (alpha < 1).
    kc, vc = rnd(b, hkv, LENGTH, d) * 0.25, rnd(b, hkv, LENGTH, d)
    qn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).to(DEV) if qk_norm else None
    kn = (1 + 0.2 * torch.randn(d, generator=gen)).to(dtype).to(DEV) if qk_norm else None
    return kc, vc, token, (qn, kn)


def _fastpath_reference(q, k, v, cos, sin, qn, kn, kc, vc, pos, scale):
    """fastpath's glue in fp32: (q/k RMSNorm,) RoPE, the cache write (k rounded to the cache dtype), then
    fastpath.decode_attention. Writes kc, vc at pos."""
    from compress.runtime import fastpath

    b, hkv, _, d = kc.shape
    qh, kh = q.reshape(b, 1, -1, d).float(), k.reshape(b, 1, hkv, d).float()
    c, s = cos.float().reshape(1, 1, d), sin.float().reshape(1, 1, d)
    if qn is None:
        qh, kh = fastpath.rope(qh, kh, c, s)
    else:
        qh, kh = fastpath.qk_norm_rope(qh, kh, qn.float(), kn.float(), 1e-6, c, s)
    kc[:, :, pos] = kh[:, 0].to(kc.dtype)
    vc[:, :, pos] = v.reshape(b, hkv, d)
    return fastpath.decode_attention(qh, kc.float(), vc.float(), torch.tensor(pos), scale).reshape(b, -1)


# (B, G, D, dtype, q/k norm): each G x norm pair, B = 1 and 2, fp16 and fp32 (+ bf16 on a GPU), D = 8 padded
# to 16 lanes.
CASES = [
    (1, 1, 16, torch.float16, False),
    (2, 1, 8, torch.float32, True),
    (2, 4, 16, torch.float16, False),
    (1, 4, 8, torch.float16, True),
    (2, 4, 16, torch.float32, True),
    pytest.param(2, 4, 16, torch.bfloat16, True, marks=GPU_ONLY),
]


def _case_id(b, g, d, dtype, qk_norm):
    return f"B{b}-G{g}-D{d}-{str(dtype)[6:]}-{'norm' if qk_norm else 'plain'}"


@needs_triton
@pytest.mark.parametrize("b,g,d,dtype,qk_norm", CASES,
                         ids=[_case_id(*(c.values if hasattr(c, "values") else c)) for c in CASES])
def test_split_mode_equals_combine_mode_and_the_references(b, g, d, dtype, qk_norm):
    """Same output (to the dtype's rounding) and bit-identical caches in both modes; both match
    attention_reference and fastpath's glue + decode_attention."""
    from compress.runtime.decode_kernels import attention_reference

    hkv = 2
    combine, split = _attention(b, hkv, g, d, "combine"), _attention(b, hkv, g, d, "split")
    kc, vc, token, (qn, kn) = _inputs(b, hkv, g, d, dtype, qk_norm, seed=b * 100 + g * 10 + d)
    kc_s, vc_s, kc_r, vc_r, kc_f, vc_f = kc.clone(), vc.clone(), kc.clone(), vc.clone(), kc.clone(), vc.clone()
    for pos in (0, CHUNK - 1, CHUNK, LENGTH - 1):  # empty cache, chunk edges, the last slot of the last chunk
        p = torch.tensor(pos, device=DEV)
        q, k, v, cos, sin = token()
        out_c = combine(q, k, v, cos, sin, kc, vc, p, 0.3, qn, kn, 1e-6)
        out_s = split(q, k, v, cos, sin, kc_s, vc_s, p, 0.3, qn, kn, 1e-6)
        torch.testing.assert_close(out_s, out_c, msg=lambda m: f"pos={pos}: {m}")  # the dtype's default rtol
        assert torch.equal(kc_s, kc) and torch.equal(vc_s, vc), pos
        ref = attention_reference(q, k, v, cos, sin, kc_r, vc_r, pos, 0.3, qn, kn, 1e-6)
        fast = _fastpath_reference(q, k, v, cos, sin, qn, kn, kc_f, vc_f, pos, 0.3)
        for name, r in (("attention_reference", ref), ("fastpath", fast)):
            assert _rel(out_s, r) < REF_TOL[dtype] and _rel(out_c, r) < REF_TOL[dtype], (name, pos, _rel(out_s, r))
        assert torch.equal(vc_s, vc_r) and torch.equal(kc_s[:, :, pos + 1:], kc_r[:, :, pos + 1:])
        assert _rel(kc_s[:, :, pos], kc_r[:, :, pos]) < REF_TOL[dtype]


@needs_triton
def test_partials_hold_the_new_token_in_chunk_0_and_empty_chunks_are_neutral():
    """At pos = CHUNK - 1 chunk 0 holds the cached tokens and the new one, chunks 1..3 nothing: (NEG, 0, 0).
    The partials' shapes are the documented views, and merging them gives the split mode's output."""
    from compress.runtime.decode_kernels import merge_partials

    b, hkv, g, d = 2, 2, 4, 16
    split = _attention(b, hkv, g, d, "split")
    kc, vc, token, _ = _inputs(b, hkv, g, d, torch.float16, False, seed=7)
    q, k, v, cos, sin = token()
    p = torch.tensor(CHUNK - 1, device=DEV)
    pm, pl, pacc = split.partials(q, k, v, cos, sin, kc, vc, p, 0.3)
    assert pm.shape == pl.shape == (b, hkv, 4, g) and pacc.shape == (b, hkv, 4, g, d)
    assert pm.dtype == pl.dtype == pacc.dtype == torch.float32
    assert (pm[:, :, 1:] == NEG).all() and (pl[:, :, 1:] == 0).all() and (pacc[:, :, 1:] == 0).all()
    assert (pl[:, :, 0] >= 1).all() and (pm[:, :, 0] > NEG / 2).all()  # the running max's token counts 1
    merged = merge_partials(pm, pl, pacc, torch.float16)
    out = split(q, k, v, cos, sin, kc.clone(), vc.clone(), p, 0.3)  # the same cache row written again
    assert torch.equal(merged, out)
    # pos = 0: chunk 0 is the new token alone, so its partial is (score, 1, v).
    kc2, vc2, token, _ = _inputs(b, hkv, g, d, torch.float16, False, seed=8)
    q, k, v, cos, sin = token()
    pm, pl, pacc = split.partials(q, k, v, cos, sin, kc2, vc2, torch.tensor(0, device=DEV), 0.3)
    assert (pl[:, :, 0] == 1).all() and (pm[:, :, 1:] == NEG).all()
    torch.testing.assert_close(pacc[:, :, 0], v.reshape(b, hkv, 1, d).float().expand(b, hkv, g, d), rtol=0, atol=0)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n_s", [5, 40])  # 40 > 32 partials: the merge reads them in two blocks
def test_merge_partials_matches_its_torch_reference(dtype, n_s):
    from compress.runtime.decode_kernels import merge_partials, merge_partials_ref

    gen = torch.Generator().manual_seed(n_s)
    b, hkv, g, d = 2, 3, 2, 24  # D = 24: padded to 32 lanes
    pm = (8 * torch.randn(b, hkv, n_s, g, generator=gen)).to(DEV)
    pl = (0.1 + 4 * torch.rand(b, hkv, n_s, g, generator=gen)).to(DEV)
    pacc = torch.randn(b, hkv, n_s, g, d, generator=gen).to(DEV) * pl[..., None]
    empty = torch.rand(b, hkv, n_s, g, generator=gen).to(DEV) < 0.4
    empty[:, :, 0] = False  # chunk 0 always holds the new token
    pm[empty], pl[empty], pacc[empty] = NEG, 0.0, 0.0
    out = merge_partials(pm, pl, pacc, dtype)
    ref = merge_partials_ref(pm, pl, pacc, dtype)
    assert out.shape == (b, hkv * g * d) and out.dtype == dtype
    torch.testing.assert_close(out, ref, rtol=1e-5 if dtype == torch.float32 else None,
                               atol=1e-6 if dtype == torch.float32 else None)
    # Empty chunks are neutral: head (0, 0, 0) with every chunk but 0 emptied is chunk 0's pacc / pl.
    pm[0, 0, 1:, 0], pl[0, 0, 1:, 0], pacc[0, 0, 1:, 0] = NEG, 0.0, 0.0
    alone = merge_partials(pm, pl, pacc, torch.float32)[0, :d]
    torch.testing.assert_close(alone, pacc[0, 0, 0, 0] / pl[0, 0, 0, 0], rtol=1e-6, atol=0)


def test_bad_new_token_mode_is_refused_by_name():
    from compress.runtime.decode_kernels import DecodeAttention

    with pytest.raises(ValueError, match="'fused'"):
        DecodeAttention(1, 4, 2, 16, 64, torch.device("cpu"), target_programs=4, new_token="fused")


_AOT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import compress.runtime.decode_kernels as dk

P16, P32 = "*fp16", "*fp32"
ATT = dict(q_ptr=P16, k_ptr=P16, v_ptr=P16, stride_qb="i32", stride_kb="i32", stride_vb="i32", cos_ptr=P16,
           sin_ptr=P16, qn_ptr=P16, kn_ptr=P16, eps="fp32", kc_ptr=P16, vc_ptr=P16, pos_ptr="*i64", pm_ptr=P32,
           pl_ptr=P32, pacc_ptr=P32, scale_log2="fp32")
MERGE = dict(pm_ptr=P32, pl_ptr=P32, pacc_ptr=P32, out_ptr=P16)
CASES = []
for fn in (dk._attn_partials, dk._attn_partials_pdl):
    for norm in (False, True):
        CASES.append((fn, ATT, dict(HKV=8, G=4, D=128, L=768, S=12, CHUNK=64, BLOCK_G=16, HAS_NORM=norm,
                                    BLOCK_D=128, BLOCK_L=64), 4, 2))
for fn in (dk._merge_partials, dk._merge_partials_pdl):
    CASES.append((fn, MERGE, dict(HKV=8, G=4, D=128, S=12, BLOCK_D=128, BLOCK_S=16), 4, 1))
for fn, types, consts, warps, stages in CASES:
    sig = {n: "constexpr" if n in consts else types[n] for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    if fn.__name__.endswith("_pdl"):  # the launch hooks are really in the code
        assert "griddepcontrol.wait" in k.asm["ptx"] and "griddepcontrol.launch_dependents" in k.asm["ptx"], fn
print("compiled", len(CASES))
"""


def test_partials_and_merge_kernels_compile_for_the_h100():
    """The CPU interpreter accepts code the GPU compiler rejects (the runtime `if` of chunk 0's program
    among them): compile the new kernels and their PDL twins for sm_90 here, without a GPU."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", _AOT], capture_output=True, text=True, env=env, timeout=300)
    if "ptxas" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("this Triton install has no ptxas")
    assert r.returncode == 0 and "compiled 6" in r.stdout, r.stderr[-2000:]
