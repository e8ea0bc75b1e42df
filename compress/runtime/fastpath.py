"""A lean forward for Llama-family decoders (Llama, Mistral, Qwen2, Qwen3) over a loaded model.

transformers' forward launches ~40 small kernels per layer at decode (fp32 RMSNorm casts, rotate_half
concatenations, repeat_kv copies of the whole cache for GQA, mask building) -- measured on the CPU
profile of one stories260K decode step. At batch 1 on an H100 those cost more than the 4-bit weights
take to stream. This module runs the same math with:
- q/k/v and gate/up fused into one layer each (`compress.runtime.fuse`), when their format allows;
- its own static KV cache (B, Hkv, L, D) per layer, written in place at a device-side position, so
  a decode step has fixed shapes and addresses and can be captured in a CUDA graph;
- GQA decode attention without repeat_kv: q is viewed as (B, Hkv, G, D) against the shared cache;
- the elementwise glue (RMSNorm, residual add + RMSNorm, RoPE, softmax, SiLU * up) in small pure
  functions that `torch.compile` fuses into one kernel each on the GPU (optional; eager on CPU);
- on the GPU, decode attention as two Triton launches per layer that also apply RoPE (and Qwen3's
  q/k norms) and write the new k/v into the cache (`compress.runtime.decode_kernels`), and dense
  Linears through `compress.runtime.dense` (cuBLAS, or the runtime's GEMV at M = 1 where measured faster).

It reuses the model's own modules (embedding, norms, runtime Linear layers, rotary embedding), so
the weights and every Linear's math are exactly those of `model`; only the glue is re-expressed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from compress.errors import CompressError
from compress.runtime.dense import linear, silu_mul_linear
from compress.runtime.fuse import fuse_outputs
from compress.runtime.paths import TABLE
from kernels.op_dispatch import on_input_device

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")


def unsupported_reason(model: nn.Module) -> str | None:
    """Why `FastLM` cannot run `model` (None when it can)."""
    cfg = model.config
    if cfg.model_type not in SUPPORTED:
        return f"model_type={cfg.model_type!r} is not one of {SUPPORTED}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act={cfg.hidden_act!r} (only silu)"
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        return "sliding-window attention layers"
    return None


# ---- elementwise glue (pure functions, so torch.compile can fuse them and reuse them across layers) ----


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' LlamaRMSNorm exactly: normalise in fp32, cast back, then scale.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + y, rms_norm(x + y)): the residual add and the next norm in one pass."""
    s = x + y
    return s, rms_norm(s, w, eps)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, T, H, D), k (B, T, Hkv, D), cos/sin (B|1, T, D): transformers' rotate_half convention."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # (B, T, 1, D)

    def rot(t):
        half = t.shape[-1] // 2
        return torch.cat((-t[..., half:], t[..., :half]), dim=-1)

    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def qk_norm_rope(q, k, qw, kw, eps, cos, sin):
    """Qwen3: per-head RMSNorm of q and k, then RoPE."""
    return rope(rms_norm(q, qw, eps), rms_norm(k, kw, eps), cos, sin)


def decode_attention(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, pos: torch.Tensor, scale: float) -> torch.Tensor:
    """One new token per sequence against the static cache, positions <= pos visible.

    q (B, 1, H, D); kc, vc (B, Hkv, L, D); returns (B, 1, H*D). Query head h uses kv head h // G
    (transformers' repeat_kv order), so q viewed as (B, Hkv, G, D) meets its kv head without copies.
    """
    b, _, h, d = q.shape
    hkv, length = kc.shape[1], kc.shape[2]
    qg = q.reshape(b, hkv, h // hkv, d)  # (B, Hkv, G, D)
    scores = torch.matmul(qg, kc.transpose(-1, -2)).float() * scale  # (B, Hkv, G, L)
    visible = torch.arange(length, device=q.device) <= pos  # (L,)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(q.dtype)
    out = torch.matmul(probs, vc)  # (B, Hkv, G, D)
    return out.reshape(b, 1, h * d)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """gate_up (.., 2I) -> silu(gate) * up (.., I)."""
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


GLUE = ("rms_norm", "add_rms_norm", "rope", "qk_norm_rope", "decode_attention", "silu_mul")


def _prequant_ok(mod) -> bool:
    """A W8A8 layer on its kernel backend that the int8 GEMV on pre-quantized activations can run."""
    from compress.runtime.formats_ct import CTW8A8Linear

    return (isinstance(mod, CTW8A8Linear) and mod.backend == "kernel" and mod.bias is None
            and mod.in_features % 4 == 0 and mod.qweight.is_contiguous())


def _w4_cuda_ok(mod, x2d: torch.Tensor) -> bool:
    """A compress.int4 layer on its kernel backend whose CUDA GEMV (kernels/w4a16_cuda.py) can take x2d (M, K)."""
    from compress.runtime import kernel_bridge as kb
    from compress.runtime.formats_compress import Int4Linear

    if not isinstance(mod, Int4Linear) or mod.backend != "kernel" or getattr(mod, "bias", None) is not None:
        return False
    if x2d.device.type != "cuda" or x2d.dtype != mod.scales.dtype:
        return False
    if kb.unavailable(x2d.device, "w4a16_cuda", "w4a16_gemv_silu_mul", "w4a16_gemv_rms_norm") is not None:
        return False
    w4 = kb.kernel_module("w4a16_cuda")
    # The fused input transforms stop at DECODE_MAX_M tokens (the GEMV itself takes more).
    return 1 <= x2d.shape[0] <= w4.DECODE_MAX_M and w4.supports(x2d, mod.qweight, mod.scales, mod.zeros, mod.group_size)


# Session 7: the W4A16 decode step can fold silu * up into the down projection and the residual add + RMSNorm
# into the q/k/v and gate/up projections (kernels/w4a16_cuda.py, "Fused inputs" in the .cu); where offered, the
# path table measures each against the separate launches. COMPRESS_DECODE_W4_FUSE lists the folds offered ("silu",
# "norm", "silu,norm"; "0" or "" none). Off by default: on the H100 the path table's single cold calls favour the
# folds (e.g. down 471 -> 28 us), but in the CUDA-graph decode step, where the separate launches overlap their
# neighbours (PDL), the extra staging work after each GEMV's dependency wait costs more: Llama-3-8B W4A16 TPOT
# 2.551 / 2.551 ms without, 2.656 / 2.654 ms with both folds, same process (bench/results/h100/e2e/session7/).
W4_FUSE_DEFAULT = "0"


def w4_fusions() -> set[str]:
    raw = os.environ.get("COMPRESS_DECODE_W4_FUSE", W4_FUSE_DEFAULT)
    got = {f.strip() for f in raw.split(",") if f.strip() not in ("", "0")}
    bad = got - {"silu", "norm"}
    if bad:
        raise CompressError(f"COMPRESS_DECODE_W4_FUSE={raw!r} names {sorted(bad)}; use a comma list of silu, norm, or 0")
    return got


# Session 9: the decode step's silu * up as a Triton launch with programmatic dependent launch instead of the compiled
# glue (an inductor kernel, launched plainly: the down projection after it could not start early). H100, Llama-3-8B
# W4A16 batch-1 decode, TPOT in one process (bench/results/h100/e2e/session9/README.md): 2.482 / 2.491 ms compiled,
# 2.420 ms Triton; the down GEMV now starts ~2.4 us before silu * up ends. COMPRESS_DECODE_SILU = "triton" | "compiled".
DECODE_SILU_DEFAULT = "triton"


def decode_silu() -> str:
    v = os.environ.get("COMPRESS_DECODE_SILU", DECODE_SILU_DEFAULT)
    if v not in ("triton", "compiled"):
        raise CompressError(f"COMPRESS_DECODE_SILU={v!r} is not triton or compiled; unset it or pick one")
    return v


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


# ---- the model ---------------------------------------------------------------------------------


@dataclass
class _Block:
    in_norm: torch.Tensor
    post_norm: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    qkv: nn.Module | None  # fused q|k|v, or None when the parts could not fuse
    q: nn.Module
    k: nn.Module
    v: nn.Module
    o: nn.Module
    gate_up: nn.Module | None
    gate: nn.Module
    up: nn.Module
    down: nn.Module


class FastLM:
    """Prefill + decode over `model`'s weights with a static KV cache of (batch, max_len).

    Args:
        model: a loaded Llama-family *ForCausalLM (e.g. from compress.runtime.load).
        batch, max_len: cache shape; every call uses exactly this batch.
        fuse: fuse q/k/v and gate/up where the format allows (same math, fewer launches).
        compile_glue: torch.compile the elementwise glue functions (GPU; one compile per shape,
            shared by all layers and all formats since they take plain tensors).
        attn_kernel: decode attention through the Triton kernels (default: on a CUDA device); False
            keeps the plain-torch attention (matmul, softmax, matmul) and index_copy_ cache writes.
        prequant: at one token, norms that feed a W8A8 layer also quantize their output for the runtime's
            int8 GEMV (Triton; default: like attn_kernel).
    """

    def __init__(self, model: nn.Module, batch: int, max_len: int, fuse: bool = True, compile_glue: bool = False,
                 attn_kernel: bool | None = None, prequant: bool | None = None):
        reason = unsupported_reason(model)
        if reason:
            raise CompressError(f"the fast path cannot run this model: {reason}; use the transformers engine")
        cfg = model.config
        self.model = model
        self.batch, self.max_len = batch, max_len
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        attn0 = model.model.layers[0].self_attn
        self.head_dim = attn0.head_dim
        self.scale = float(getattr(attn0, "scaling", 1 / math.sqrt(self.head_dim)))
        self.eps = float(cfg.rms_norm_eps)
        self.embed = model.model.embed_tokens
        self.final_norm = model.model.norm.weight
        self.lm_head = model.lm_head
        self.rotary = model.model.rotary_emb
        self.blocks = [self._block(layer, fuse) for layer in model.model.layers]
        p = next(iter(model.parameters()))
        self.device, self.dtype = p.device, self.final_norm.dtype
        shape = (batch, self.n_kv, max_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in self.blocks]
        self.v_cache = [torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in self.blocks]
        self.pos = torch.zeros((), dtype=torch.long, device=self.device)  # tokens already in the cache
        self.rope_table = self._rope_table()
        self.fn = {name: globals()[name] for name in GLUE}
        self.w4_fuse = w4_fusions()  # read once: an engine's graphs replay what it was built with
        self.decode_silu = decode_silu()  # the same
        if attn_kernel is None:
            attn_kernel = self.device.type == "cuda" and _triton_available()
        # One-token decode: norms quantize their output for W8A8 consumers (GPU, Triton).
        self.prequant = bool(attn_kernel) if prequant is None else prequant
        self.attn = None
        if attn_kernel:
            from compress.runtime.decode_kernels import DecodeAttention

            self.attn = DecodeAttention(batch, self.n_heads, self.n_kv, self.head_dim, max_len, self.device)
        if compile_glue:
            # Automatic dynamic shapes: a second shape compiles one shape-generic kernel instead of one
            # per (batch, length), so seven workloads cost a few compiles, not dozens.
            self.fn = {name: torch.compile(f, fullgraph=True) for name, f in self.fn.items()}

    # RoPE variants whose cos/sin depend only on the position (not on the longest sequence seen so far).
    STATIC_ROPE = ("default", "linear", "llama3")

    def _rope_table(self) -> torch.Tensor | None:
        """(1, max_len, 2, D): the rotary module's (cos, sin) for every cache position, or None for RoPE
        variants that rescale with the sequence length. A decode step then gathers its row (one launch)
        instead of the module's ~8 small kernels (bmm, cat, cos, sin, scaling, casts; roughly 10 us per step in
        the H100 profile). Each entry is computed exactly as for a single position (K = 1 product, then
        elementwise), so the values are the same."""
        if getattr(self.rotary, "rope_type", None) not in self.STATIC_ROPE:
            return None
        probe = torch.zeros(1, 1, 1, dtype=self.embed.weight.dtype, device=self.device)  # x of a decode step
        cos, sin = self.rotary(probe, torch.arange(self.max_len, device=self.device)[None, :])  # (1, L, D)
        return torch.stack([cos, sin], dim=2)

    @staticmethod
    def _block(layer: nn.Module, fuse: bool) -> _Block:
        a, m = layer.self_attn, layer.mlp
        qkv = gate_up = None
        if fuse:
            # Fused once per model and kept on the layer (outside its state_dict): the parts become
            # views of the fused weights, so later FastLMs over the same model reuse them.
            cached = layer.__dict__.get("_compress_fused")
            if cached is None:
                cached = (fuse_outputs([a.q_proj, a.k_proj, a.v_proj]), fuse_outputs([m.gate_proj, m.up_proj]))
                layer.__dict__["_compress_fused"] = cached
            qkv, gate_up = cached
        qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
        return _Block(layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                      None if qn is None else qn.weight, None if kn is None else kn.weight,
                      qkv, a.q_proj, a.k_proj, a.v_proj, a.o_proj, gate_up, m.gate_proj, m.up_proj, m.down_proj)

    def fused_counts(self) -> dict[str, int]:
        return {"qkv": sum(b.qkv is not None for b in self.blocks), "gate_up": sum(b.gate_up is not None for b in self.blocks),
                "layers": len(self.blocks)}

    def reset(self) -> None:
        """Forget the cached sequence (in place: CUDA graphs captured on this cache stay valid)."""
        self.pos.zero_()

    # ---- per block ------------------------------------------------------------------------------

    def _qkv(self, blk: _Block, h: torch.Tensor, hq=None):
        b, t, _ = h.shape
        q, k, v = self._qkv_flat(blk, h, hq)
        return (q.reshape(b, t, self.n_heads, self.head_dim), k.reshape(b, t, self.n_kv, self.head_dim),
                v.reshape(b, t, self.n_kv, self.head_dim))

    def _qkv_flat(self, blk: _Block, h: torch.Tensor, hq=None, pre: torch.Tensor | None = None):
        """q (.., H*D), k and v (.., Hkv*D): views of the fused output, or the three layers' outputs.
        pre: the fused projection's output already computed (by the GEMV that also did the norm)."""
        if blk.qkv is not None:
            return (self._proj(blk.qkv, h, hq) if pre is None else pre).split([self.n_heads * self.head_dim, self.n_kv * self.head_dim,
                                                     self.n_kv * self.head_dim], dim=-1)
        return linear(blk.q, h), linear(blk.k, h), linear(blk.v, h)

    def _mlp(self, blk: _Block, h: torch.Tensor, hq=None, pre: torch.Tensor | None = None) -> torch.Tensor:
        """pre: gate_up's output already computed (by the GEMV that also did the norm)."""
        if pre is not None:
            gu = pre
        elif blk.gate_up is not None:
            gu = self._proj(blk.gate_up, h, hq)
        else:
            gu = torch.cat([linear(blk.gate, h), linear(blk.up, h)], dim=-1)
        if hq is not None and _prequant_ok(blk.down):
            return self._silu_down(blk.down, gu)
        if "silu" in self.w4_fuse and _w4_cuda_ok(blk.down, gu.reshape(-1, gu.shape[-1])[:, : blk.down.in_features]):
            return self._silu_down_w4(blk.down, gu)
        return silu_mul_linear(blk.down, gu, self._silu_mul_fn(gu))

    def _silu_mul_fn(self, gu: torch.Tensor):
        """silu * up for the MLP: the compiled glue, or at decode (<= 64 rows, the decode kernels on, PDL on) the
        Triton launch that keeps the step's chain of programmatically dependent launches (decode_kernels.silu_mul)
        when COMPRESS_DECODE_SILU said "triton" (default DECODE_SILU_DEFAULT) as the engine was built."""
        rows = gu.numel() // gu.shape[-1]
        if self.attn is None or rows > 64 or self.decode_silu != "triton":
            return self.fn["silu_mul"]
        from compress.runtime.decode_kernels import pdl_enabled, silu_mul

        return silu_mul if pdl_enabled(gu.device) else self.fn["silu_mul"]

    def _silu_down_w4(self, mod: nn.Module, gu: torch.Tensor) -> torch.Tensor:
        """mod(silu(gate) * up) for a W4A16 down projection: the glue's silu * up then the layer, or the CUDA GEMV
        that forms silu * up while it stages its activations (one launch less per layer), whichever the path
        table measures faster."""
        from compress.runtime import kernel_bridge as kb

        w4 = kb.kernel_module("w4a16_cuda")
        rows = gu.numel() // gu.shape[-1]
        cands = [("silu_mul+down", lambda: silu_mul_linear(mod, gu, self.fn["silu_mul"])),
                 ("cuda_gemv_silu", lambda: w4.w4a16_gemv_silu_mul(gu, mod.qweight, mod.scales, mod.zeros,
                                                                   mod.group_size))]
        return TABLE.run(("w4a16_silu_down", mod.out_features, mod.in_features, rows, str(gu.dtype)), cands, gu.device)

    def _add_norm_proj(self, x, y, w, mod, quant: bool = False):
        """`_add_norm` -> (x + y, h, hq, None); or, at decode where `mod` (the projection that reads h) is a W4A16
        layer whose CUDA GEMV can fold the residual add + RMSNorm into its activation staging and the path table
        measures that faster: (x + y, None, None, mod(h)) with h never written."""
        x2 = x.reshape(-1, x.shape[-1])
        if (quant or mod is None or y is None or "norm" not in self.w4_fuse or len({x.dtype, y.dtype, w.dtype}) != 1
                or x.shape[-1] % 8 or not _w4_cuda_ok(mod, x2)):
            return (*self._add_norm(x, y, w, quant), None)
        from compress.runtime import kernel_bridge as kb

        w4 = kb.kernel_module("w4a16_cuda")

        def separate():
            s, h, _ = self._add_norm(x, y, w)
            return s, linear(mod, h)

        def fused():
            return w4.w4a16_gemv_rms_norm(x, y, w, self.eps, mod.qweight, mod.scales, mod.zeros, mod.group_size)

        key = ("w4a16_norm_proj", mod.out_features, mod.in_features, x2.shape[0], str(x.dtype))
        s, out = TABLE.run(key, [("add_rms_norm+proj", separate), ("cuda_gemv_norm", fused)], x.device)
        return s, None, None, out

    def _silu_down(self, mod: nn.Module, gu: torch.Tensor) -> torch.Tensor:
        """mod(silu(gate) * up) at one token for a W8A8 down projection: silu * up + int8 quantization as
        one launch, then the projection (`_proj`) -- or the int8 GEMV that computes silu * up and quantizes
        it while it reads its input (no launch of its own: the separate one took 6.6 us per layer at
        I = 14336 on the H100, one program per row), whichever the path table measures faster. Both give
        the same int8 codes."""
        from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8, silu_mul_quant

        lead, n = gu.shape[:-1], mod.out_features
        g2 = gu.reshape(1, -1)

        def separate():
            a, aq = silu_mul_quant(gu)
            return self._proj(mod, a, aq)

        def fused(cfg):
            return gemv_i8(g2, None, mod.qweight, mod.scale, gu.dtype, cfg, silu_mul=True).reshape(*lead, n)

        cands = [("silu_mul_quant+down", separate)]
        cands += [("gemv_i8_silu_%dx%d_w%d" % c, lambda c=c: fused(c)) for c in GEMV_I8_CONFIGS]
        return TABLE.run(("w8a8_silu_down", n, mod.in_features, 1, str(gu.dtype)), cands, gu.device)

    def _proj(self, mod: nn.Module, h: torch.Tensor, hq=None) -> torch.Tensor:
        """mod(h); for a W8A8 layer at one token with h's int8 quantization already made by the kernel
        that produced h (`hq` = (q, scale)), also the runtime's int8 GEMV on it, if measured faster than
        the W8A8 kernel (which quantizes h itself: one launch more, ~7 us on the H100)."""
        if hq is None or not _prequant_ok(mod):
            return linear(mod, h)
        from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8

        def pre(cfg):
            return gemv_i8(hq[0], hq[1], mod.qweight, mod.scale, h.dtype, cfg).reshape(*h.shape[:-1], mod.out_features)

        cands = [("w8a8 layer (quantizes x)", lambda: mod(h))]
        cands += [("gemv_i8_prequant_%dx%d_w%d" % c, lambda c=c: pre(c)) for c in GEMV_I8_CONFIGS]
        return TABLE.run(("w8a8_prequant", mod.out_features, mod.in_features, 1, str(h.dtype)), cands, h.device)

    def _rope(self, blk, q, k, cos, sin):
        if blk.q_norm is not None:
            return self.fn["qk_norm_rope"](q, k, blk.q_norm, blk.k_norm, self.eps, cos, sin)
        return self.fn["rope"](q, k, cos, sin)

    def _add_norm(self, x, y, w, quant: bool = False):
        """Residual add + RMSNorm: the compiled glue, or on the GPU the one-row-per-program Triton kernel
        where the path table measured it faster (decode: a 4096-wide row is a latency-bound launch).
        quant: the Triton kernel, also returning the int8 quantization of the normed row (x, h, (q, s))."""
        f = self.fn["add_rms_norm"]
        if quant:
            from compress.runtime.decode_kernels import add_rms_norm

            return add_rms_norm(x, y, w, self.eps, quant=True)
        if not TABLE.enabled(x.device) or not (x.dtype == y.dtype == w.dtype):
            return (*f(x, y, w, self.eps), None)
        from compress.runtime.decode_kernels import add_rms_norm

        rows = x.numel() // x.shape[-1]
        return (*TABLE.run(("add_rms_norm", x.shape[-1], 1, rows, str(x.dtype)),
                           [("compiled", lambda: f(x, y, w, self.eps)),
                            ("triton_row", lambda: add_rms_norm(x, y, w, self.eps))], x.device), None)

    def _layers(self, x: torch.Tensor, cos, sin, attend, attend_raw=None) -> torch.Tensor:
        """Run all blocks; `attend(i, q, k, v)` stores k/v in the cache and returns (B, T, H*D);
        `attend_raw(i, blk, h, hq)`, when given, does the projections' glue itself (decode kernels).

        One token on the GPU: where the consumer of a norm's output is a W8A8 layer, the norm kernel also
        quantizes its output (hq), so the projection can skip its own quantizer launch (`_proj`)."""
        rows = x.numel() // x.shape[-1]
        pq = rows == 1 and x.dtype == self.final_norm.dtype and self.prequant
        blk0 = self.blocks[0]
        if pq and _prequant_ok(blk0.qkv):
            _, h, hq = self._add_norm(x, None, blk0.in_norm, quant=True)
        else:
            h, hq = self.fn["rms_norm"](x, blk0.in_norm, self.eps), None
        # Decode (attend_raw): a W4A16 projection may take the residual add + RMSNorm into its GEMV
        # (`_add_norm_proj`); its output then comes back as `pre` and h stays None.
        fold = attend_raw is not None and rows <= 16
        pre = None
        for i, blk in enumerate(self.blocks):
            if attend_raw is not None:
                a = attend_raw(i, blk, h, hq, pre)
            else:
                q, k, v = self._qkv(blk, h, hq)
                q, k = self._rope(blk, q, k, cos, sin)
                a = attend(i, q, k, v)
            x, h, hq, pre = self._add_norm_proj(x, linear(blk.o, a), blk.post_norm, blk.gate_up if fold else None,
                                                quant=pq and _prequant_ok(blk.gate_up))
            nxt_blk = self.blocks[i + 1] if i + 1 < len(self.blocks) else None
            nxt = nxt_blk.in_norm if nxt_blk is not None else self.final_norm
            x, h, hq, pre = self._add_norm_proj(x, self._mlp(blk, h, hq, pre), nxt,
                                                nxt_blk.qkv if fold and nxt_blk is not None else None,
                                                quant=pq and nxt_blk is not None and _prequant_ok(nxt_blk.qkv))
        return h  # the final norm's output

    # ---- public steps ---------------------------------------------------------------------------

    @on_input_device  # its glue kernels launch on the current device: make it the model's
    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) starting an empty cache -> logits (B, V) of the last position; the cache holds T tokens."""
        b, t = ids.shape
        if b != self.batch or t > self.max_len:
            raise CompressError(f"prefill of {tuple(ids.shape)} does not fit the cache (batch {self.batch}, {self.max_len} tokens)")
        x = self.embed(ids)
        positions = torch.arange(t, device=ids.device)[None, :]
        cos, sin = self.rotary(x, positions)

        def attend(i, q, k, v):
            self.k_cache[i][:, :, :t] = k.transpose(1, 2)
            self.v_cache[i][:, :, :t] = v.transpose(1, 2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                               scale=self.scale, enable_gqa=self.n_heads != self.n_kv)
            return o.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)

        h = self._layers(x, cos, sin, attend)
        self.pos.fill_(t)
        return linear(self.lm_head, h[:, -1])

    @on_input_device  # its glue kernels launch on the current device: make it the model's
    @torch.no_grad()
    def decode(self, tok: torch.Tensor) -> torch.Tensor:
        """tok (B, 1) at position `pos` -> logits (B, V); advances `pos` (all on the device: graph-safe)."""
        x = self.embed(tok)
        positions = self.pos.reshape(1, 1)
        if self.rope_table is not None:
            cs = self.rope_table.index_select(1, self.pos.reshape(1))  # (1, 1, 2, D), gathered on the device
            cos, sin = cs[:, :, 0], cs[:, :, 1]
        else:
            cos, sin = self.rotary(x, positions)
        where = self.pos.reshape(1)

        def attend(i, q, k, v):
            self.k_cache[i].index_copy_(2, where, k.transpose(1, 2))
            self.v_cache[i].index_copy_(2, where, v.transpose(1, 2))
            return self.fn["decode_attention"](q, self.k_cache[i], self.v_cache[i], self.pos, self.scale)

        attend_raw = None
        if self.attn is not None:
            c, s = cos.reshape(-1, self.head_dim)[0], sin.reshape(-1, self.head_dim)[0]  # (D,): one position
            b = tok.shape[0]

            def attend_raw(i, blk, h, hq, pre=None):
                q, k, v = (t.reshape(b, -1) for t in self._qkv_flat(blk, h, hq, pre))

                def kernel():
                    return self.attn(q, k, v, c, s, self.k_cache[i], self.v_cache[i], self.pos, self.scale, blk.q_norm,
                                     blk.k_norm, self.eps).reshape(b, 1, -1)

                def plain():  # the same step in torch ops: RoPE, two cache writes, matmul-softmax-matmul
                    qr, kr = self._rope(blk, q.reshape(b, 1, self.n_heads, -1), k.reshape(b, 1, self.n_kv, -1), cos, sin)
                    return attend(i, qr, kr, v.reshape(b, 1, self.n_kv, -1))

                # Both write the same k/v into the same slot, so timing them (paths.TABLE) changes nothing.
                key = ("decode_attention", self.n_heads * self.head_dim, self.max_len, b,
                       f"{q.dtype}{'+qk_norm' if blk.q_norm is not None else ''}")
                return TABLE.run(key, [("triton", kernel), ("torch", plain)], q.device)

        h = self._layers(x, cos, sin, attend, attend_raw)
        self.pos.add_(1)
        return linear(self.lm_head, h[:, -1])
