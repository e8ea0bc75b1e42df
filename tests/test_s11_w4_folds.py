"""Session 11: two launches folded into the W4A16 CUDA GEMV of the decode step (kernels/w4a16_cuda.py, the .cu's xform 3
and 4) and the fast engine's use of them (COMPRESS_DECODE_W4_FUSE = gate_silu, attn_o; compress/runtime/fastpath.py):
- the gate/up GEMV writes silu(gate) * up from its epilogue (`w4a16_gemv_gate_up_silu`);
- the o_proj GEMV merges decode attention's split partials while it stages its activations (`w4a16_gemv_attn_merge`).
"""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.errors import CompressError
from compress.runtime import fastpath
from kernels import w4a16_cuda
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

from tests.test_s9_decode_silu import _tiny_w4a16
from tests.test_w4a16_cuda import TOL, rel_err

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")


def merge_ref(pm, pl, pacc, dtype):
    """The merged attention output (B, H * D): fp32, rounded once (decode_kernels.merge_partials' math)."""
    w = torch.exp2(pm - pm.amax(dim=2, keepdim=True))  # (B, Hkv, S, G)
    num = (w[..., None] * pacc).sum(2)  # (B, Hkv, G, D)
    den = (w * pl).sum(2)[..., None]
    return (num / den).reshape(pm.shape[0], -1).to(dtype)


def random_partials(b, hkv, s, g, d, empty, seed=0, device="cuda"):
    """Partials as the split launch leaves them: chunk maxima in log2 units, positive sums, weighted values; the
    chunks in `empty` hold no position (m = -1e30, l = 0, acc = 0), as chunks past the sequence do."""
    gen = torch.Generator().manual_seed(seed)
    pm = torch.randn(b, hkv, s, g, generator=gen) * 4
    pl = torch.rand(b, hkv, s, g, generator=gen) * 30 + 1
    pacc = torch.randn(b, hkv, s, g, d, generator=gen) * pl[..., None]
    for c in empty:
        pm[:, :, c], pl[:, :, c], pacc[:, :, c] = -1.0e30, 0.0, 0.0
    return pm.to(device), pl.to(device), pacc.to(device)


# ----------------------------------------------------------------------------------------------------- CPU
def test_fold_setting_takes_the_new_folds_and_refuses_unknown_ones(monkeypatch):
    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "gate_silu, attn_o")
    assert fastpath.w4_fusions() == {"gate_silu", "attn_o"}
    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "gate_silu,attn")
    with pytest.raises(CompressError, match=r"COMPRESS_DECODE_W4_FUSE='gate_silu,attn' names \['attn'\]; use a comma "
                                            r"list of silu, norm, gate_silu, attn_o, or 0"):
        fastpath.w4_fusions()


@pytest.mark.skipif(CUDA, reason="a CPU engine: with a GPU present Triton compiles for it and refuses CPU tensors")
def test_engine_with_the_folds_asked_decodes_the_same_on_cpu(monkeypatch):
    """On a CPU the GEMV folds are not offered (no CUDA kernel), but "attn_o" still moves the new token into the split
    launch and merges in a launch of its own (Triton interpreter): the logits match the two-launch attention's."""
    model = _tiny_w4a16(monkeypatch, "cpu")
    ids = torch.randint(0, 300, (1, 7), generator=torch.Generator().manual_seed(1))

    def logits(fuse):
        monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", fuse)
        lm = fastpath.FastLM(model, 1, 16, attn_kernel=True)
        assert lm.attn.new_token == ("split" if "attn_o" in fuse else "combine")
        out = [lm.prefill(ids)]
        for _ in range(3):
            out.append(lm.decode(out[-1].argmax(-1, keepdim=True)))
        return torch.stack(out)

    base, folded = logits("0"), logits("gate_silu,attn_o")
    assert rel_err(folded, base) < 1e-3
    assert torch.equal(folded.argmax(-1), base.argmax(-1))


@pytest.mark.skipif(w4a16_cuda.cuda_build.nvcc() is None, reason="nvcc not installed")
def test_fold_build_compiles_for_the_h100_and_exports_the_merge_entry(tmp_path, monkeypatch):
    import ctypes

    monkeypatch.setenv("COMPRESS_KERNEL_CACHE", str(tmp_path))
    lib = ctypes.CDLL(str(w4a16_cuda.compile_variant("90a", "w16b2s2", xform=True)))
    assert hasattr(lib, "w4a16_gemv_attn") and hasattr(lib, "w4a16_gemv_x")


# ----------------------------------------------------------------------------------------------------- GPU
GATE_UP = [(64, 256), (96, 320), (1024, 4096), (28672, 4096)]  # (2I, K): I = 32, 48 (partial CTA), 512, 8B's 14336


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
@pytest.mark.parametrize("n,k", GATE_UP, ids=[f"{n}x{k}" for n, k in GATE_UP])
def test_gate_up_silu_epilogue_matches_the_separate_gemv_and_glue(dtype, gs, sym, n, k):
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k)
    args = (p["qweight"], p["scales"], p["zeros"], gs)
    for m in (1, 3, 8) if k == 4096 else (1, 3, 8, 9, 16):  # 9..16 tokens x K = 4096 in one CTA: over shared memory
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        got = w4a16_cuda.w4a16_gemv_gate_up_silu(x, *args)
        assert got.shape == (m, n // 2) and got.dtype == dtype
        # The same variant with one K chunk computes the same fp32 sums: only the exp may round differently.
        name = w4a16_cuda._configure(x.device, dtype, m, n, k, p["qweight"], gs, p["zeros"], None, None, None, None,
                                     None, None, "gate_silu")[1]
        same_sums = w4a16_cuda._launch(x, *args, name=name, waves=1e-6)
        assert rel_err(got, w4a16_cuda.silu_mul_ref(same_sums)) < 1e-3
        assert rel_err(got, w4a16_cuda.gate_up_silu_ref(x, *args)) < TOL[dtype], f"M={m}"


@gpu
def test_gate_up_silu_refuses_what_it_cannot_fold():
    p = make_int4(80, 256, 128, True, torch.float16, "cuda")
    with pytest.raises(CompressError, match="has 80 rows; it needs a multiple of 32"):
        w4a16_cuda.w4a16_gemv_gate_up_silu(torch.randn(1, 256, device="cuda").half(), p["qweight"], p["scales"])
    p = make_int4(64, 256, 128, True, torch.float16, "cuda")
    with pytest.raises(CompressError, match="more than 16 tokens"):
        w4a16_cuda.w4a16_gemv_gate_up_silu(torch.randn(17, 256, device="cuda").half(), p["qweight"], p["scales"])


ATTN = [(1, 8, 12, 4, 128, (5, 11)), (2, 2, 5, 1, 64, (4,)), (3, 4, 1, 2, 128, ()), (1, 8, 33, 4, 128, tuple(range(9, 33)))]


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("b,hkv,s,g,d,empty", ATTN, ids=[f"b{a[0]}h{a[1]}s{a[2]}g{a[3]}d{a[4]}" for a in ATTN])
def test_attention_merge_in_the_o_proj_staging_matches_merge_then_gemv(dtype, b, hkv, s, g, d, empty):
    k, n = hkv * g * d, 4096 if hkv * g * d == 4096 else 200
    p = make_int4(n, k, 128, True, dtype, "cuda", seed=k)
    args = (p["qweight"], p["scales"], p["zeros"], 128)
    pm, pl, pacc = random_partials(b, hkv, s, g, d, empty, seed=b + s)
    got = w4a16_cuda.w4a16_gemv_attn_merge(pm, pl, pacc, *args)
    assert got.shape == (b, n) and got.dtype == dtype
    merged = merge_ref(pm, pl, pacc, dtype)
    assert rel_err(got, w4a16_linear_ref(merged, *args)) < TOL[dtype]
    # Against the plain GEMV on the merged rows: only the merge's summation order differs.
    assert rel_err(got, w4a16_cuda.w4a16_gemv(merged, *args)) < TOL[dtype]


@gpu
def test_attention_merge_same_bytes_back_to_back_and_in_a_graph():
    p = make_int4(4096, 4096, 128, True, torch.float16, "cuda", seed=3)
    args = (p["qweight"], p["scales"], p["zeros"], 128)
    pm, pl, pacc = random_partials(1, 8, 12, 4, 128, (7,), seed=2)
    first = w4a16_cuda.w4a16_gemv_attn_merge(pm, pl, pacc, *args)
    again = [w4a16_cuda.w4a16_gemv_attn_merge(pm, pl, pacc, *args) for _ in range(3)]  # PDL, back to back
    assert all(torch.equal(a, first) for a in again)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = w4a16_cuda.w4a16_gemv_attn_merge(pm, pl, pacc, *args)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)


@gpu
def test_attention_merge_refuses_bad_partials():
    p = make_int4(200, 256, 128, True, torch.float16, "cuda")
    pm, pl, pacc = random_partials(1, 2, 3, 1, 128, ())
    with pytest.raises(CompressError, match="do not fit"):
        w4a16_cuda.w4a16_gemv_attn_merge(pm, pl[:, :, :2], pacc, p["qweight"], p["scales"])
    with pytest.raises(CompressError, match="contiguous float32"):
        w4a16_cuda.w4a16_gemv_attn_merge(pm.double(), pl, pacc, p["qweight"], p["scales"])
    with pytest.raises(CompressError, match="does not fit in_features"):  # K = 2 * 1 * 64 = 128 against a K = 256 layer
        w4a16_cuda.w4a16_gemv_attn_merge(*random_partials(1, 2, 3, 1, 64, ()), p["qweight"], p["scales"])


@gpu
def test_fast_engine_decode_with_both_folds_matches_without(monkeypatch):
    """The W4A16 engine's decode with the two folds (when the path table takes them) against the separate launches:
    the same greedy tokens, logits within rounding."""
    from compress.runtime.paths import TABLE

    model = _tiny_w4a16(monkeypatch, "cuda")
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(0)).cuda()

    def decode_logits(fuse):
        monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", fuse)
        TABLE.clear()
        lm = fastpath.FastLM(model, 1, 16)
        logits = [lm.prefill(ids)]
        for _ in range(4):
            logits.append(lm.decode(logits[-1].argmax(-1, keepdim=True)))
        return torch.stack(logits), {k[0] for k in TABLE.choice}

    off, _ = decode_logits("0")
    on, keys = decode_logits("gate_silu,attn_o")
    TABLE.clear()
    assert {"w4a16_gate_up_silu", "w4a16_attn_o"} <= keys  # both folds were offered (and measured)
    assert rel_err(on, off) < 1e-2
    assert torch.equal(on.argmax(-1), off.argmax(-1))

