"""Session 7: the W4A16 CUDA GEMV with the decode step's glue folded into its activation staging -- silu * up
(down projection) and residual add + RMSNorm (q/k/v and gate/up projections) -- against the plain-torch
references, and the fast engine's use of them (compress/runtime/fastpath.py)."""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.errors import CompressError
from compress.runtime import fastpath
from kernels import w4a16_cuda
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

from tests.test_w4a16_cuda import _same_bytes_with_pdl_and_graphs, rel_err

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
# (N, K): partial CTAs, K = 64 * odd (the staging's element-by-element end of K), Llama-3-8B down / qkv shapes.
SHAPES = [(40, 256), (257, 320), (4096, 14336), (6144, 4096)]


def _x(m, k, dtype, seed, scale=1.0):
    return (torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)) * scale).to(dtype)


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_silu_mul_gemv_matches_reference(dtype, gs, sym, n, k):
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k)
    for m in (1, 3, 9, 16):
        gu = _x(m, 2 * k, dtype, m, 2.0)
        out = w4a16_cuda.w4a16_gemv_silu_mul(gu, p["qweight"], p["scales"], p["zeros"], gs)
        assert out.shape == (m, n) and out.dtype == dtype
        ref = w4a16_linear_ref(w4a16_cuda.silu_mul_ref(gu), p["qweight"], p["scales"], p["zeros"], gs)
        assert rel_err(out, ref) < TOL[dtype], f"M={m}"


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("gs,sym", [(128, True), (64, False)], ids=["g128sym", "g64asym"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("with_y", [True, False], ids=["add", "norm_only"])
def test_rms_norm_gemv_matches_reference(dtype, gs, sym, n, k, with_y):
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k + 1)
    w = (1 + 0.1 * _x(1, k, torch.float32, 7)).reshape(k).to(dtype)
    for m in (1, 3, 9, 16):
        x, y = _x(m, k, dtype, m, 3.0), (_x(m, k, dtype, m + 100) if with_y else None)
        s, out = w4a16_cuda.w4a16_gemv_rms_norm(x, y, w, 1e-5, p["qweight"], p["scales"], p["zeros"], gs)
        s_ref, h_ref = w4a16_cuda.add_rms_norm_ref(x, y, w, 1e-5)
        assert torch.equal(s, s_ref), f"M={m}: the residual sum is one rounding of x + y"
        ref = w4a16_linear_ref(h_ref, p["qweight"], p["scales"], p["zeros"], gs)
        assert out.shape == (m, n) and rel_err(out, ref) < TOL[dtype], f"M={m}"


@gpu
@pytest.mark.parametrize("xform", ["silu_mul", "rms_norm"])
@pytest.mark.parametrize("how", ["cluster", "balanced", "one_chunk"])
def test_fused_inputs_under_every_schedule(xform, how):
    """The split-K cluster reduction, the balanced schedule and a single K chunk stage the same activations."""
    n, k = 1000, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=3)
    opts = {"cluster": dict(cluster=True, waves=0.5), "balanced": dict(balanced=True),
            "one_chunk": dict(waves=0.01, min_blocks=64)}[how]
    for m in (1, 16):
        if xform == "silu_mul":
            gu = _x(m, 2 * k, torch.float16, m)
            out = w4a16_cuda._launch(gu, p["qweight"], p["scales"], None, 128, xform="silu_mul", **opts)
            h = w4a16_cuda.silu_mul_ref(gu)
        else:
            x, y, w = _x(m, k, torch.float16, m), _x(m, k, torch.float16, m + 1), _x(1, k, torch.float16, 9).reshape(k)
            s = torch.empty_like(x)
            out = w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, xform="rms_norm", y=y, norm_w=w, eps=1e-5,
                                     s_out=s, **opts)
            s_ref, h = w4a16_cuda.add_rms_norm_ref(x, y, w, 1e-5)
            assert torch.equal(s, s_ref)
        assert rel_err(out, w4a16_linear_ref(h, p["qweight"], p["scales"], None, 128)) < TOL[torch.float16], (how, m)


@gpu
def test_fused_chain_same_bytes_with_pdl_and_graph_replay():
    """A decode-like chain (norm-fused gate_up, silu-fused down, norm-fused qkv reading the residual the first one
    wrote) gives the bytes of plain launches with programmatic dependent launch, eagerly and in graph replays."""
    k, i = 4096, 14336
    gate_up = make_int4(2 * i, k, 128, True, torch.float16, "cuda", seed=1)
    down = make_int4(k, i, 128, True, torch.float16, "cuda", seed=2)
    qkv = make_int4(6144, k, 128, True, torch.float16, "cuda", seed=3)
    x, y = _x(1, k, torch.float16, 1), _x(1, k, torch.float16, 2)
    w1, w2 = _x(1, k, torch.float16, 3).reshape(k), _x(1, k, torch.float16, 4).reshape(k)

    def step(pdl):
        s1 = torch.empty_like(x)
        gu = w4a16_cuda._launch(x, gate_up["qweight"], gate_up["scales"], None, 128, pdl=pdl, xform="rms_norm", y=y,
                                norm_w=w1, eps=1e-5, s_out=s1)
        d = w4a16_cuda._launch(gu, down["qweight"], down["scales"], None, 128, pdl=pdl, xform="silu_mul")
        s2 = torch.empty_like(x)
        q = w4a16_cuda._launch(s1, qkv["qweight"], qkv["scales"], None, 128, pdl=pdl, xform="rms_norm", y=d,
                               norm_w=w2, eps=1e-5, s_out=s2)
        return [s1, gu, d, s2, q]

    want = step(0)
    _same_bytes_with_pdl_and_graphs(step, want)
    s_ref, h = w4a16_cuda.add_rms_norm_ref(want[0], want[2], w2, 1e-5)
    assert torch.equal(want[3], s_ref)
    assert rel_err(want[4], w4a16_linear_ref(h, qkv["qweight"], qkv["scales"], None, 128)) < TOL[torch.float16]


def _tiny_w4a16(monkeypatch):
    from compress.bench import e2e_synthetic as syn

    monkeypatch.setitem(syn.ARCHS, "s7-tiny", dict(
        model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=300, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, mlp_bias=False))
    return syn.build_synthetic("s7-tiny", "w4a16", "cuda", seed=0)


@gpu
def test_fast_engine_decode_with_the_fused_gemvs(monkeypatch):
    """The fast engine's decode with the folds forced on gives the logits of the separate launches."""
    from compress.runtime.paths import TABLE

    model = _tiny_w4a16(monkeypatch)
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(0)).cuda()

    def decode_logits():
        lm = fastpath.FastLM(model, 1, 16)
        assert lm.fused_counts()["gate_up"] == 2
        logits = [lm.prefill(ids)]
        for _ in range(4):
            logits.append(lm.decode(logits[-1].argmax(-1, keepdim=True)))
        return torch.stack(logits)

    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "0")
    TABLE.clear()
    off = decode_logits()
    assert not [k for k in TABLE.choice if k[0] in ("w4a16_silu_down", "w4a16_norm_proj")]
    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "silu,norm")
    TABLE.clear()
    decode_logits()  # measures the new keys
    keys = [k for k in TABLE.choice if k[0] in ("w4a16_silu_down", "w4a16_norm_proj")]
    assert {k[0] for k in keys} == {"w4a16_silu_down", "w4a16_norm_proj"}
    for key in keys:  # force the fused GEMVs, whatever the timing said
        TABLE.choice[key] = "cuda_gemv_silu" if key[0] == "w4a16_silu_down" else "cuda_gemv_norm"
    on = decode_logits()
    TABLE.clear()
    assert rel_err(on, off) < 1e-2
    assert torch.equal(on.argmax(-1), off.argmax(-1))


@gpu
def test_default_build_refuses_input_transforms():
    """The session-6 kernels (built without -DW4_XFORM) answer -5 to a transform; the launcher takes the XFORM build."""
    p = make_int4(64, 256, 128, True, torch.float16, "cuda", seed=0)
    gu = torch.randn(1, 512, device="cuda").half()
    lib = w4a16_cuda.build(gu.device, w4a16_cuda.DEFAULT_VARIANT)
    out = torch.empty(1, 64, device="cuda", dtype=torch.float16)
    ws, cnt = w4a16_cuda._workspace.get(gu.device, 1, 1)
    rc = lib.w4a16_gemv_x(gu.data_ptr(), 0, p["qweight"].data_ptr(), p["scales"].data_ptr(), None, out.data_ptr(),
                          ws.data_ptr(), cnt.data_ptr(), 1, 64, 256, 512, 128, 2, 1, 0,
                          torch.cuda.current_stream().cuda_stream, 1, None, None, None, 0.0)
    assert rc == -5
    ref = w4a16_linear_ref(w4a16_cuda.silu_mul_ref(gu), p["qweight"], p["scales"], None, 128)
    assert rel_err(w4a16_cuda.w4a16_gemv_silu_mul(gu, p["qweight"], p["scales"]), ref) < TOL[torch.float16]


# ----------------------------------------------------------------------------------------------------- CPU
@pytest.mark.skipif(w4a16_cuda.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("w4a16_xform")
def test_xform_build_compiles_for_the_h100(sm90_library):
    """The opt-in build with the fused inputs compiles for sm_90a (no GPU needed) and exports its entry point."""
    import ctypes

    lib = ctypes.CDLL(str(sm90_library))
    assert hasattr(lib, "w4a16_gemv_x") and "_xf_" in lib._name


def test_fused_launchers_refuse_bad_shapes_with_the_fix():
    q = torch.zeros(8, 32, dtype=torch.int32)
    sc = torch.ones(2, 8, dtype=torch.float16)
    with pytest.raises(CompressError, match="even last dim"):
        w4a16_cuda.w4a16_gemv_silu_mul(torch.zeros(1, 255, dtype=torch.float16), q, sc)
    x = torch.zeros(1, 256, dtype=torch.float16)
    with pytest.raises(CompressError, match="norm weight"):
        w4a16_cuda.w4a16_gemv_rms_norm(x, x, torch.ones(128, dtype=torch.float16), 1e-5, q, sc)
    with pytest.raises(CompressError, match="one dtype"):
        w4a16_cuda.w4a16_gemv_rms_norm(x, x.float(), torch.ones(256, dtype=torch.float16), 1e-5, q, sc)
    with pytest.raises(CompressError, match="needs CUDA tensors"):
        w4a16_cuda.w4a16_gemv_silu_mul(torch.zeros(1, 512, dtype=torch.float16), q, sc)


def test_references_round_like_the_runtime_glue():
    torch.manual_seed(0)
    gu = (torch.randn(3, 64) * 3).half()
    g, u = gu.float().chunk(2, dim=-1)
    assert torch.equal(w4a16_cuda.silu_mul_ref(gu), (g * torch.sigmoid(g) * u).half())
    x, y, w = torch.randn(2, 32).half(), torch.randn(2, 32).half(), torch.randn(32).half()
    s, h = w4a16_cuda.add_rms_norm_ref(x, y, w, 1e-5)
    s2, h2 = fastpath.add_rms_norm(x, y, w, 1e-5)
    assert torch.equal(s, s2) and torch.equal(h, h2)


def test_fusion_switch(monkeypatch):
    monkeypatch.delenv("COMPRESS_DECODE_W4_FUSE", raising=False)
    assert fastpath.w4_fusions() == set()  # off by default: measured slower end to end (session 7)
    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "silu,norm")
    assert fastpath.w4_fusions() == {"silu", "norm"}
    for off in ("0", ""):
        monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", off)
        assert fastpath.w4_fusions() == set()
    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "silu")
    assert fastpath.w4_fusions() == {"silu"}
    monkeypatch.setenv("COMPRESS_DECODE_W4_FUSE", "silu,gelu")
    with pytest.raises(CompressError, match="gelu"):
        fastpath.w4_fusions()


def test_no_fused_path_on_cpu():
    """On a CPU an int4 layer on its kernel backend never takes the CUDA folds (the engine keeps its separate glue)."""
    from compress.runtime.formats_compress import Int4Linear
    from compress.runtime.spec import LayerSpec

    p = make_int4(64, 256, 128, True, torch.float16, "cpu", seed=0)
    mod = Int4Linear(LayerSpec("l", "compress.int4", 256, 64, False, {"group_size": 128}), torch.float16, p["qweight"],
                     p["scales"], p["zeros"], 128)
    mod.backend = "kernel"
    assert not fastpath._w4_cuda_ok(mod, torch.zeros(1, 256, dtype=torch.float16))
    assert not fastpath._w4_cuda_ok(torch.nn.Linear(256, 64), torch.zeros(1, 256, dtype=torch.float16))
