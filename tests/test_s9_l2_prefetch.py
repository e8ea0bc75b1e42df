"""Session 9: the W4A16 GEMV's own-chunk L2 prefetch before its dependency wait (kernels/w4a16_cuda.py, Args.pf in the
.cu) and the decode step's silu * up as a Triton launch with programmatic dependent launch
(compress/runtime/decode_kernels.silu_mul)."""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.errors import CompressError
from compress.runtime import decode_kernels, fastpath
from kernels import w4a16_cuda
from kernels.cases import make_int4

from tests.test_w4a16_cuda import rel_err

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")
DEV = "cuda" if CUDA else "cpu"


def _tiny_w4a16(monkeypatch, device):
    from compress.bench import e2e_synthetic as syn

    monkeypatch.setitem(syn.ARCHS, "s9-tiny", dict(
        model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=300, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, mlp_bias=False))
    return syn.build_synthetic("s9-tiny", "w4a16", device, seed=0)


# ----------------------------------------------------------------------------------------------------- CPU + GPU
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("m,i", [(1, 512), (3, 1000), (2, 2304)])
def test_triton_silu_mul_is_the_glue_math(dtype, m, i):
    """The compiled glue's math (fp32, rounded once; byte-equal in the CPU interpreter), over several column blocks and
    a ragged end."""
    gu = (torch.randn(m, 2 * i, generator=torch.Generator().manual_seed(i)) * 3).to(dtype).to(DEV)
    got = decode_kernels.silu_mul(gu)
    g, u = gu.float().chunk(2, dim=-1)
    v = g / (1 + torch.exp(-g)) * u
    if DEV == "cpu" and dtype == torch.bfloat16:  # Triton's CPU interpreter casts fp32 -> bf16 by truncation
        want = (v.view(torch.int32) & ~0xFFFF).view(torch.float32).to(dtype)
    else:
        want = v.to(dtype)
    assert got.shape == (m, i) and got.dtype == dtype
    if DEV == "cpu":
        assert torch.equal(got, want)
    else:  # the GPU's exp is not torch's to the last fp32 bit: a rounding may flip
        assert rel_err(got, want) < {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    assert torch.equal(decode_kernels.silu_mul(gu.reshape(m, 1, 2 * i)), got.reshape(m, 1, i))


def test_settings_refuse_bad_values_with_the_fix(monkeypatch):
    monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", "lots")
    with pytest.raises(CompressError, match="COMPRESS_W4A16_L2_PREFETCH_MB='lots'.*unset it"):
        w4a16_cuda.l2_prefetch_bytes()
    monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", "-1")
    with pytest.raises(CompressError, match="from 0 to 1024"):
        w4a16_cuda.l2_prefetch_bytes()
    monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", "1.5")
    assert w4a16_cuda.l2_prefetch_bytes() == 3 * 2**19
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "fast")
    with pytest.raises(CompressError, match="COMPRESS_DECODE_SILU='fast' is not triton or compiled"):
        fastpath.decode_silu()


def test_prefetch_budget_arithmetic():
    """The whole chunk when the budget holds every (row, chunk) head, fewer blocks when it does not, none at 0."""
    assert w4a16_cuda.prefetch_blocks(4096 * 8, 4, 64 * 2**20) == 4
    assert w4a16_cuda.prefetch_blocks(28672, 32, 8 * 2**20) == 8 * 2**20 // (64 * 28672)
    assert w4a16_cuda.prefetch_blocks(28672, 32, 0) == 0
    assert w4a16_cuda.prefetch_blocks(28672, 32, 1000) == 0


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("n,k", [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (1024, 4096), (300, 256)])
@pytest.mark.parametrize("m", [1, 5, 16, 40])
def test_prefetch_changes_no_output_byte(monkeypatch, n, k, m):
    """The GEMV with its chunk heads prefetched (budgets that cut them short and that cover them) gives the bytes of
    the GEMV without, eagerly and in CUDA-graph replays, launched right after another GEMV under PDL mode 2."""
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
    x = torch.randn(m, k, device="cuda").half()
    monkeypatch.setenv("COMPRESS_W4A16_PDL", "2")
    monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", "0")
    want = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"])
    for mb in ("0.25", "8", "1024"):
        monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", mb)
        assert torch.equal(w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"]), want), mb
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # two launches back to back: the second prefetches while the first runs
            first = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"])
            second = w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"])
        for _ in range(2):
            g.replay()
        torch.cuda.synchronize()
        assert torch.equal(first, want) and torch.equal(second, want), mb


@gpu
def test_fast_engine_decode_is_the_same_with_prefetch_and_triton_silu(monkeypatch):
    """The fast engine's logits with the L2 prefetch and the Triton silu * up match those without, step for step."""
    from compress.runtime.paths import TABLE

    model = _tiny_w4a16(monkeypatch, "cuda")
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(0)).cuda()

    def decode_logits():
        lm = fastpath.FastLM(model, 1, 16)
        logits = [lm.prefill(ids)]
        for _ in range(4):
            logits.append(lm.decode(logits[-1].argmax(-1, keepdim=True)))
        return torch.stack(logits)

    TABLE.clear()
    monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", "0")
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "compiled")
    off = decode_logits()
    monkeypatch.setenv("COMPRESS_W4A16_L2_PREFETCH_MB", "16")
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "triton")
    on = decode_logits()  # the path table's choices are kept: the same kernels, with the prefetch
    TABLE.clear()
    assert torch.equal(on, off) or rel_err(on, off) < 1e-3
    assert torch.equal(on.argmax(-1), off.argmax(-1))
