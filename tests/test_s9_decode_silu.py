"""Session 9: the decode step's silu * up as a Triton launch with programmatic dependent launch
(compress/runtime/decode_kernels.silu_mul), the fast engine's default at decode on Hopper (COMPRESS_DECODE_SILU)."""

from __future__ import annotations

import pytest

import kernels  # noqa: F401  (before anything imports triton: turns its CPU interpreter on without a GPU)
import torch

from compress.errors import CompressError
from compress.runtime import decode_kernels, fastpath

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


def test_setting_refuses_bad_values_with_the_fix(monkeypatch):
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "fast")
    with pytest.raises(CompressError, match="COMPRESS_DECODE_SILU='fast' is not triton or compiled"):
        fastpath.decode_silu()
    monkeypatch.delenv("COMPRESS_DECODE_SILU")
    assert fastpath.decode_silu() == fastpath.DECODE_SILU_DEFAULT


def test_silu_choice_keeps_the_compiled_glue_off_the_decode_path(monkeypatch):
    """Prefill rows (> 64), a CPU engine (no decode kernels) and "compiled" keep the glue function; only a one-token
    decode on a PDL device may take the Triton launch."""
    model = _tiny_w4a16(monkeypatch, "cpu")
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "triton")
    lm = fastpath.FastLM(model, 1, 16)
    gu = torch.zeros(1, 1, 1024)
    assert lm._silu_mul_fn(gu) is lm.fn["silu_mul"]  # CPU: no decode kernels, no PDL


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
def test_fast_engine_decode_is_the_same_with_the_triton_silu(monkeypatch):
    """The fast engine's logits with the Triton silu * up match those with the glue function, step for step."""
    from compress.runtime.paths import TABLE

    model = _tiny_w4a16(monkeypatch, "cuda")
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(0)).cuda()

    def decode_logits():
        lm = fastpath.FastLM(model, 1, 16)
        logits = [lm.prefill(ids)]
        for _ in range(4):
            logits.append(lm.decode(logits[-1].argmax(-1, keepdim=True)))
        return torch.stack(logits)

    monkeypatch.setenv("COMPRESS_DECODE_SILU", "triton")
    lm = fastpath.FastLM(model, 1, 16)
    assert lm._silu_mul_fn(torch.zeros(1, 1, 1024, device="cuda")) is decode_kernels.silu_mul
    assert lm._silu_mul_fn(torch.zeros(1, 65, 1024, device="cuda")) is lm.fn["silu_mul"]  # prefill rows
    TABLE.clear()
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "compiled")
    off = decode_logits()
    monkeypatch.setenv("COMPRESS_DECODE_SILU", "triton")
    on = decode_logits()  # the path table's choices are kept: the same GEMVs
    TABLE.clear()
    assert torch.equal(on, off) or rel_err(on, off) < 1e-3
    assert torch.equal(on.argmax(-1), off.argmax(-1))
