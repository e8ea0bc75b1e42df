"""Triton kernels for the batch-decode glue of the fast engine: decode attention over the static KV
cache (with RoPE, Qwen3's q/k RMSNorm and the cache write folded in), a fp16/bf16 GEMV for M = 1,
residual add + RMSNorm (+ int8 quantization of its output), the int8 GEMVs of W8A8 (dp4a; optionally
quantizing, and computing silu * up of, their input themselves) and the W8A16 kernels (GEMV for M = 1,
few-row kernel for M <= 16, dequantization into a dense temporary).

Why (profile of one Llama-3-8B fp16 decode step on the H100, bench/results/h100/e2e): the attention of
one new token was six launches per layer (RoPE, two index_copy_ cache writes, two bmm, softmax) =
0.58 ms of a 6.5 ms step, for a few MB of cache; cuBLAS's M=1 kernels stream 4096x4096 (o_proj) at
about half the copy bandwidth. These kernels are the runtime's own glue, not a checkpoint format's math.

Decode attention is split in two launches ("flash decoding"):
- `_attn_split` (grid B*Hkv x S): each program takes one kv head, its G = H/Hkv query heads (padded to
  16 rows for tl.dot) and one chunk of the cached positions < pos, and writes the chunk's running
  max, sum and weighted values (fp32) to a scratch buffer.
- `_attn_combine` (grid B*H, one query head each): RoPE (+ RMSNorm) of the new token's k, its cache write
  at `pos` (by the kv head's first query head), the new token's own score, and the merge of the S
  partials -> (B, 1, H*D).
The new token is scored in the combine step, so no program reads a cache row another program of the
same launch writes. `pos` is read on the device: the launches are CUDA-graph safe.

On Hopper the kernels a decode step launches (attention, GEMVs, norms) start while the kernel before
them finishes (programmatic dependent launch; COMPRESS_DECODE_PDL=0 turns it off; see "PDL" below).

On a CPU the kernels run in Triton's interpreter (tests only); importing `kernels` sets that up.
"""

from __future__ import annotations

import math
import os

import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU-only machines before triton loads)
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from kernels._common import pdl_enabled  # noqa: F401  (the decode step's PDL switch, defined beside the kernels)
from kernels.w8a8 import _dp4a, _int8_codes, _quotient, _round_half_even, _sbyte  # noqa: F401  (shared int8 helpers)
from kernels.op_dispatch import on_input_device

LOG2E = 1.4426950408889634
NEG = tl.constexpr(-1.0e30)  # "minus infinity" that stays finite (empty chunks must not make NaN in the merge)


# ---- programmatic dependent launch (PDL) ---------------------------------------------------------
# A decode step is ~290 launches of these kernels back to back; each used to start only after the one
# before had drained, and then waited a DRAM round trip for its first bytes. With PDL (Hopper) a kernel
# starts while its predecessor finishes: it asks for its successor's launch at once
# (`gdc_launch_dependents`), reads what no kernel of the step writes (weights; the KV cache rows before
# the step's position) before `gdc_wait`, and everything else -- and every store -- after it. `gdc_wait`
# returns when the predecessor grid has completed and its writes are visible; every program of every
# such kernel calls it, so completion is transitive down the chain and no program reads or overwrites a
# buffer an earlier kernel still uses. On by default; COMPRESS_DECODE_PDL=0 turns it off (A/B runs); never
# on CPUs (the interpreter runs no inline asm) or before sm_90. H100, Llama-3-8B W8A8 batch-1 decode, TPOT
# of session 3's kernels vs these, in one process: 3.502 -> 3.415 ms (3.639 ms with PDL off), and in a
# second run 3.479 -> 3.393 ms (bench/results/h100/e2e/session4_w8a8/README.md).


def _pick(plain, with_pdl, device: torch.device):
    """(kernel, launch options) for a launch on `device`: each kernel that takes part exists twice, the
    same body (`*_impl`, PDL a constexpr) behind its original signature and behind a `*_pdl` twin."""
    return (with_pdl, {"launch_pdl": True}) if pdl_enabled(device) else (plain, {})


@triton.jit
def _silu_times(g, u):
    """silu(g) * u in fp32 (g, u fp32): the expression every silu * up of these kernels uses, so the fused GEMVs, the
    quantizing launch and the plain launch round the same value once to the activation dtype (the compiled glue's
    rounding)."""
    return g / (1.0 + tl.exp(-g)) * u


# ---- RoPE on one head, in registers ----------------------------------------------------------------


@triton.jit
def _rope_heads(ptr, row_off, offs_d, mask2d, cos_ptr, sin_ptr, nw_ptr, eps,
                D: tl.constexpr, HAS_NORM: tl.constexpr):
    """Rows `row_off` (R,) of head vectors at ptr + row_off + d: optional RMSNorm (fp32, cast to the
    input dtype, times the weight, as transformers does), then RoPE with transformers' rotate_half:
    out[d] = x[d] * cos[d] + sign(d) * x[(d + D/2) % D] * sin[d]. Returns fp32 values rounded to
    the input dtype (the reference's rounding points)."""
    half: tl.constexpr = D // 2
    d_mask = offs_d < D  # offs_d may be padded up to 16 lanes (tl.dot's minimum)
    partner = (offs_d + half) % D
    mask2d = mask2d & d_mask[None, :]
    x = tl.load(ptr + row_off[:, None] + offs_d[None, :], mask=mask2d, other=0.0)
    xp = tl.load(ptr + row_off[:, None] + partner[None, :], mask=mask2d, other=0.0)
    dt = x.dtype
    if HAS_NORM:
        xf = x.to(tl.float32)
        r = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=1) / D + eps)
        w = tl.load(nw_ptr + offs_d, mask=d_mask, other=0.0).to(tl.float32)
        wp = tl.load(nw_ptr + partner, mask=d_mask, other=0.0).to(tl.float32)
        x = ((xf * r[:, None]).to(dt).to(tl.float32) * w[None, :]).to(dt)
        xp = ((xp.to(tl.float32) * r[:, None]).to(dt).to(tl.float32) * wp[None, :]).to(dt)
    c = tl.load(cos_ptr + offs_d, mask=d_mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + offs_d, mask=d_mask, other=0.0).to(tl.float32)
    sign = tl.where(offs_d < half, -1.0, 1.0)
    out = x.to(tl.float32) * c[None, :] + sign[None, :] * xp.to(tl.float32) * s[None, :]
    return out.to(dt)


@triton.jit
def _attn_split_impl(q_ptr, stride_qb, cos_ptr, sin_ptr, qn_ptr, eps, kc_ptr, vc_ptr, pos_ptr,
                     pm_ptr, pl_ptr, pacc_ptr, scale_log2,
                     HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                     CHUNK: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_L: tl.constexpr, HAS_NORM: tl.constexpr,
                     BLOCK_D: tl.constexpr, PDL: tl.constexpr):
    pid_bh = tl.program_id(0)
    pid_s = tl.program_id(1)
    if PDL:
        gdc_launch_dependents()
    b = pid_bh // HKV
    h = pid_bh % HKV
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    g_mask = offs_g < G
    cache = (b * HKV + h).to(tl.int64) * L * D
    start = pid_s * CHUNK
    # The cached rows < pos and pos itself are written before a decode step starts (the previous step's
    # combine, the position update between steps), never during one: with PDL the chunk's first tile is
    # requested before `gdc_wait`, while the q/k/v projection still runs (at 768 cached tokens the
    # chunk is one tile). q comes from that projection: after the wait.
    pos = tl.load(pos_ptr).to(tl.int32)
    offs_l = start + tl.arange(0, BLOCK_L)
    kv_mask = (offs_l < pos)[:, None] & d_ok[None, :]
    kv_off = cache + offs_l[:, None] * D + offs_d[None, :]
    k = tl.load(kc_ptr + kv_off, mask=kv_mask, other=0.0)
    v = tl.load(vc_ptr + kv_off, mask=kv_mask, other=0.0)
    if PDL:
        gdc_wait()
    qrow = b * stride_qb + (h * G + offs_g) * D
    q = _rope_heads(q_ptr, qrow, offs_d, g_mask[:, None], cos_ptr, sin_ptr, qn_ptr, eps, D, HAS_NORM)
    m = tl.full([BLOCK_G], NEG, tl.float32)
    l = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for l0 in range(0, CHUNK, BLOCK_L):
        offs_l = start + l0 + tl.arange(0, BLOCK_L)
        l_mask = offs_l < pos  # cached tokens only; the new one is scored in _attn_combine
        sc = tl.dot(q, tl.trans(k)) * scale_log2  # (BLOCK_G, BLOCK_L), log2 units
        sc = tl.where(l_mask[None, :], sc, float("-inf"))
        m_new = tl.maximum(m, tl.max(sc, axis=1))
        p = tl.exp2(sc - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
        # the chunk's next tile (none after the last: masked)
        nxt = offs_l + BLOCK_L
        kv_mask = ((nxt < pos) & (l0 + BLOCK_L < CHUNK))[:, None] & d_ok[None, :]
        kv_off = cache + nxt[:, None] * D + offs_d[None, :]
        k = tl.load(kc_ptr + kv_off, mask=kv_mask, other=0.0)
        v = tl.load(vc_ptr + kv_off, mask=kv_mask, other=0.0)
    part = (pid_bh * S + pid_s) * G + offs_g
    tl.store(pm_ptr + part, m, mask=g_mask)
    tl.store(pl_ptr + part, l, mask=g_mask)
    tl.store(pacc_ptr + part[:, None] * D + offs_d[None, :], acc, mask=g_mask[:, None] & d_ok[None, :])


@triton.jit
def _attn_split(q_ptr, stride_qb, cos_ptr, sin_ptr, qn_ptr, eps, kc_ptr, vc_ptr, pos_ptr,
                pm_ptr, pl_ptr, pacc_ptr, scale_log2,
                HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                CHUNK: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_L: tl.constexpr, HAS_NORM: tl.constexpr,
                BLOCK_D: tl.constexpr):
    _attn_split_impl(q_ptr, stride_qb, cos_ptr, sin_ptr, qn_ptr, eps, kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr,
                     scale_log2, HKV, G, D, L, S, CHUNK, BLOCK_G, BLOCK_L, HAS_NORM, BLOCK_D, False)


@triton.jit
def _attn_split_pdl(q_ptr, stride_qb, cos_ptr, sin_ptr, qn_ptr, eps, kc_ptr, vc_ptr, pos_ptr,
                    pm_ptr, pl_ptr, pacc_ptr, scale_log2,
                    HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                    CHUNK: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_L: tl.constexpr, HAS_NORM: tl.constexpr,
                    BLOCK_D: tl.constexpr):
    _attn_split_impl(q_ptr, stride_qb, cos_ptr, sin_ptr, qn_ptr, eps, kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr,
                     scale_log2, HKV, G, D, L, S, CHUNK, BLOCK_G, BLOCK_L, HAS_NORM, BLOCK_D, True)


@triton.jit
def _attn_combine_impl(q_ptr, k_ptr, v_ptr, stride_qb, stride_kb, stride_vb, cos_ptr, sin_ptr, qn_ptr, kn_ptr, eps,
                       kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr, out_ptr, scale_log2,
                       HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                       HAS_NORM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, PDL: tl.constexpr):
    """One program per query head (grid B*H): the S partials of its kv head are read as (BLOCK_S, D)
    tiles, so a short loop of independent loads replaces the 2*S dependent steps of one program per kv
    head (H100 profile, Llama-3-8B W8A8 decode: 5.5 us per call with grid B*Hkv = 8)."""
    pid = tl.program_id(0)
    b = pid // (HKV * G)
    hq = pid % (HKV * G)  # query head
    h = hq // G  # its kv head
    g = hq % G
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    pos = tl.load(pos_ptr).to(tl.int32)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    # Rows helpers work on blocks of rows: row 0 is the head, row 1 is masked to zero (summing the two
    # rows gives row 0 back exactly).
    two = tl.arange(0, 2)
    first = two < 1
    # The new token's k (RoPE, + RMSNorm) and v; the kv head's first query head writes them at `pos`.
    k = tl.sum(_rope_heads(k_ptr, b * stride_kb + h * D + two * 0, offs_d, first[:, None], cos_ptr, sin_ptr,
                           kn_ptr, eps, D, HAS_NORM).to(tl.float32), axis=0)  # (BLOCK_D,)
    v = tl.load(v_ptr + b * stride_vb + h * D + offs_d, mask=d_ok, other=0.0)  # (BLOCK_D,)
    slot = (b * HKV + h).to(tl.int64) * L * D + pos * D
    writer = d_ok & (g == 0)
    tl.store(kc_ptr + slot + offs_d, k.to(kc_ptr.dtype.element_ty), mask=writer)
    tl.store(vc_ptr + slot + offs_d, v, mask=writer)
    q = tl.sum(_rope_heads(q_ptr, b * stride_qb + hq * D + two * 0, offs_d, first[:, None], cos_ptr, sin_ptr, qn_ptr,
                           eps, D, HAS_NORM).to(tl.float32), axis=0)  # (BLOCK_D,), the values _attn_split used
    s_new = tl.sum(q * k, axis=0) * scale_log2
    # Merge: chunks at or beyond pos are empty (their m is NEG and l is 0), so every chunk is read.
    offs_s = tl.arange(0, BLOCK_S)
    base = (b * HKV + h) * S * G + g  # partial (chunk s) of this head: base + s * G
    mx = s_new
    for s0 in range(0, S, BLOCK_S):
        ss = s0 + offs_s
        mx = tl.maximum(mx, tl.max(tl.load(pm_ptr + base + ss * G, mask=ss < S, other=NEG), axis=0))
    w_new = tl.exp2(s_new - mx)
    total = w_new
    acc = w_new * v.to(tl.float32)
    for s0 in range(0, S, BLOCK_S):
        ss = s0 + offs_s
        s_ok = ss < S
        w = tl.exp2(tl.load(pm_ptr + base + ss * G, mask=s_ok, other=NEG) - mx)  # (BLOCK_S,)
        total += tl.sum(w * tl.load(pl_ptr + base + ss * G, mask=s_ok, other=0.0), axis=0)
        pacc = tl.load(pacc_ptr + (base + ss * G).to(tl.int64)[:, None] * D + offs_d[None, :],
                       mask=s_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_S, BLOCK_D)
        acc += tl.sum(w[:, None] * pacc, axis=0)
    out = acc / total
    tl.store(out_ptr + b * (HKV * G * D) + hq * D + offs_d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


@triton.jit
def _attn_combine(q_ptr, k_ptr, v_ptr, stride_qb, stride_kb, stride_vb, cos_ptr, sin_ptr, qn_ptr, kn_ptr, eps,
                  kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr, out_ptr, scale_log2,
                  HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                  HAS_NORM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    _attn_combine_impl(q_ptr, k_ptr, v_ptr, stride_qb, stride_kb, stride_vb, cos_ptr, sin_ptr, qn_ptr, kn_ptr, eps,
                       kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr, out_ptr, scale_log2, HKV, G, D, L, S,
                       HAS_NORM, BLOCK_D, BLOCK_S, False)


@triton.jit
def _attn_combine_pdl(q_ptr, k_ptr, v_ptr, stride_qb, stride_kb, stride_vb, cos_ptr, sin_ptr, qn_ptr, kn_ptr, eps,
                      kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr, out_ptr, scale_log2,
                      HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, L: tl.constexpr, S: tl.constexpr,
                      HAS_NORM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    _attn_combine_impl(q_ptr, k_ptr, v_ptr, stride_qb, stride_kb, stride_vb, cos_ptr, sin_ptr, qn_ptr, kn_ptr, eps,
                       kc_ptr, vc_ptr, pos_ptr, pm_ptr, pl_ptr, pacc_ptr, out_ptr, scale_log2, HKV, G, D, L, S,
                       HAS_NORM, BLOCK_D, BLOCK_S, True)


class DecodeAttention:
    """Decode attention of one new token per sequence against a static cache (B, Hkv, L, D).

    Built once per cache shape (the chunking is fixed at construction, so each call launches the
    same two kernels with the same arguments layout: capturable). Holds the fp32 scratch for the
    chunk partials, shared by all layers (they run one after the other)."""

    def __init__(self, batch: int, n_heads: int, n_kv: int, head_dim: int, max_len: int, device: torch.device,
                 target_programs: int | None = None, block_l: int = 64):
        self.BLOCK_L = block_l
        if n_heads % n_kv or head_dim % 2 or head_dim > 256:
            raise ValueError(f"decode attention needs H % Hkv == 0 and an even head_dim <= 256, got "
                             f"H={n_heads}, Hkv={n_kv}, D={head_dim}")
        self.b, self.h, self.hkv, self.d, self.len = batch, n_heads, n_kv, head_dim, max_len
        self.g = n_heads // n_kv
        if self.g > 64:
            raise ValueError(f"decode attention supports up to 64 query heads per kv head, got {self.g}")
        self.block_g = max(16, triton.next_power_of_2(self.g))
        if target_programs is None:
            sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132
            target_programs = 2 * sms
        # Chunks of the cache per (sequence, kv head): enough programs to cover the GPU twice, each
        # at least one BLOCK_L tile.
        tiles = -(-max_len // self.BLOCK_L)
        splits = max(1, min(tiles, target_programs // (batch * n_kv)))
        self.chunk = -(-tiles // splits) * self.BLOCK_L
        self.splits = -(-max_len // self.chunk)
        self.block_s = min(32, triton.next_power_of_2(self.splits))  # partials the combine step reads at once
        n = batch * n_kv * self.splits * self.g
        self.pm = torch.empty(n, dtype=torch.float32, device=device)
        self.pl = torch.empty(n, dtype=torch.float32, device=device)
        self.pacc = torch.empty(n * head_dim, dtype=torch.float32, device=device)

    @on_input_device
    def __call__(self, q, k, v, cos, sin, k_cache, v_cache, pos, scale: float, q_norm=None, k_norm=None,
                 eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
        """q (B, H*D) / k, v (B, Hkv*D) rows of the projection outputs (row stride free, heads
        contiguous); cos, sin (D,) for position `pos`; caches (B, Hkv, L, D) contiguous; pos: 0-dim
        int tensor = tokens already cached. Writes k/v at pos; returns (B, H*D) in q's dtype."""
        b, d = self.b, self.d
        for t, n in ((q, self.h), (k, self.hkv), (v, self.hkv)):
            assert t.shape == (b, n * d) and t.stride(1) == 1, (t.shape, t.stride())
        assert k_cache.is_contiguous() and v_cache.is_contiguous() and k_cache.shape == (b, self.hkv, self.len, d)
        if out is None:
            out = torch.empty(b, self.h * d, dtype=q.dtype, device=q.device)
        has_norm = q_norm is not None
        qn = q_norm if has_norm else cos
        kn = k_norm if has_norm else cos
        s_log2 = float(scale) * LOG2E
        common = dict(HKV=self.hkv, G=self.g, D=d, L=self.len, S=self.splits, CHUNK=self.chunk, BLOCK_G=self.block_g,
                      HAS_NORM=has_norm, BLOCK_D=max(16, triton.next_power_of_2(d)))
        split, opts = _pick(_attn_split, _attn_split_pdl, q.device)
        split[(b * self.hkv, self.splits)](
            q, q.stride(0), cos, sin, qn, eps, k_cache, v_cache, pos, self.pm, self.pl, self.pacc, s_log2,
            BLOCK_L=self.BLOCK_L, num_warps=4, num_stages=2, **common, **opts)
        combine, opts = _pick(_attn_combine, _attn_combine_pdl, q.device)
        combine[(b * self.h,)](
            q, k, v, q.stride(0), k.stride(0), v.stride(0), cos, sin, qn, kn, eps, k_cache, v_cache, pos,
            self.pm, self.pl, self.pacc, out, s_log2, HKV=self.hkv, G=self.g, D=d, L=self.len, S=self.splits,
            HAS_NORM=has_norm, BLOCK_D=common["BLOCK_D"], BLOCK_S=self.block_s,
            num_warps=4, **opts)
        return out


# ---- GEMV: y (1, N) = x (1, K) @ W (N, K)^T, fp16/bf16 --------------------------------------------


@triton.jit
def _gemv_impl(x_ptr, w_ptr, y_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               SILU_MUL: tl.constexpr, PDL: tl.constexpr):
    """y = x @ W^T for one row x. SILU_MUL: x_ptr holds [gate | up] (2K values) and x = silu(gate) * up,
    computed in fp32 and rounded to the activation dtype (the rounding of the separate glue kernel),
    so the MLP's elementwise step needs no launch of its own.
    Weight tiles are double-buffered as in `_gemv_i8` (the first two requested before `gdc_wait`)."""
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    rows = w_ptr + offs_n.to(tl.int64)[:, None] * K
    # Weights stream through once: evict them first, so x stays cached for the other programs.
    w = tl.load(rows + offs_k[None, :], mask=n_mask[:, None] & (offs_k < K)[None, :], other=0.0,
                eviction_policy="evict_first")
    nxt = BLOCK_K + offs_k
    w_next = tl.load(rows + nxt[None, :], mask=n_mask[:, None] & (nxt < K)[None, :], other=0.0,
                     eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        k_mask = kk < K
        xk = tl.load(x_ptr + kk, mask=k_mask, other=0.0)
        if SILU_MUL:
            g = xk.to(tl.float32)
            u = tl.load(x_ptr + K + kk, mask=k_mask, other=0.0).to(tl.float32)
            xk = _silu_times(g, u).to(w.dtype)
        acc += w.to(tl.float32) * xk.to(tl.float32)[None, :]
        w = w_next
        nxt = kk + 2 * BLOCK_K
        w_next = tl.load(rows + nxt[None, :], mask=n_mask[:, None] & (nxt < K)[None, :], other=0.0,
                         eviction_policy="evict_first")
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty), mask=n_mask)


@triton.jit
def _gemv(x_ptr, w_ptr, y_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          SILU_MUL: tl.constexpr):
    _gemv_impl(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N, BLOCK_K, SILU_MUL, False)


@triton.jit
def _gemv_pdl(x_ptr, w_ptr, y_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              SILU_MUL: tl.constexpr):
    _gemv_impl(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N, BLOCK_K, SILU_MUL, True)


# Configs the path table (compress.runtime.paths) tries per shape: (BLOCK_N, BLOCK_K, num_warps).
# Measured on the H100 (graph of 32 calls over distinct weights, GB/s; cuBLAS in brackets): 16x512/4
# warps was the best of the first four everywhere: qkv 6144x4096 2615 [2365], o 4096x4096 2417 [2032],
# gate_up 28672x4096 2996 [2866], down 4096x14336 2738 [2620], lm_head 128256x4096 3108 [2824]
# (bench/results/h100/e2e/diag/); its neighbours are tried too.
GEMV_CONFIGS = ((16, 512, 4), (16, 1024, 8), (16, 256, 4), (8, 512, 4), (32, 512, 8))


@on_input_device
def gemv(x: torch.Tensor, w: torch.Tensor, config: tuple[int, int, int] = GEMV_CONFIGS[0],
         silu_mul: bool = False) -> torch.Tensor:
    """x (1, K) @ w (N, K)^T -> (1, N), fp32 accumulation, in x's dtype (w contiguous, same dtype).
    silu_mul: x is (1, 2K) = [gate | up] and the product uses silu(gate) * up."""
    n, k = w.shape
    assert x.shape == (1, 2 * k if silu_mul else k) and w.stride(1) == 1 and w.stride(0) == k, (x.shape, w.shape)
    x = x.contiguous()
    y = torch.empty(1, n, dtype=x.dtype, device=x.device)
    bn, bk, warps = config
    bk = min(bk, triton.next_power_of_2(k))
    kernel, opts = _pick(_gemv, _gemv_pdl, x.device)
    kernel[(triton.cdiv(n, bn),)](x, w, y, n, K=k, BLOCK_N=bn, BLOCK_K=bk, SILU_MUL=silu_mul, num_warps=warps, **opts)
    return y


@triton.jit
def _gemv_w8(x_ptr, q_ptr, s_ptr, y_ptr, N, K: tl.constexpr, G: tl.constexpr, GS: tl.constexpr,
             BLOCK_N: tl.constexpr, NG: tl.constexpr):
    """int8 weights with one scale per (row, group of GS columns): y[n] = sum_g s[n,g] sum_k q[n,k] x[k]."""
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_g = tl.arange(0, NG)
    offs_e = tl.arange(0, GS)
    n_mask = offs_n < N
    rows = offs_n.to(tl.int64) * K
    acc = tl.zeros([BLOCK_N, NG, GS], tl.float32)
    for g0 in range(0, G, NG):
        gg = g0 + offs_g
        g_mask = gg < G
        kk = gg[:, None] * GS + offs_e[None, :]  # (NG, GS)
        m3 = n_mask[:, None, None] & g_mask[None, :, None]
        q = tl.load(q_ptr + rows[:, None, None] + kk[None, :, :], mask=m3, other=0, eviction_policy="evict_first")
        sc = tl.load(s_ptr + offs_n[:, None] * G + gg[None, :], mask=n_mask[:, None] & g_mask[None, :], other=0.0)
        xk = tl.load(x_ptr + kk, mask=g_mask[:, None], other=0.0)
        acc += (q.to(tl.float32) * sc.to(tl.float32)[:, :, None]) * xk.to(tl.float32)[None, :, :]
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty), mask=n_mask)


def gemv_w8_supported(k: int, group_size: int) -> bool:
    """Shapes `gemv_w8` takes: power-of-two groups of 16..1024 columns that tile K exactly."""
    return 16 <= group_size <= 1024 and group_size & (group_size - 1) == 0 and k % group_size == 0


# (BLOCK_N, columns per step, num_warps) the path table tries for `gemv_w8`. The first is session 2's
# fixed choice; at M = 1 it streamed 4096x4096 at 1.1 TB/s and 4096x14336 at 1.5 TB/s on the H100
# (session 3 path table), so wider steps (more bytes in flight per program) are offered beside it.
# Every config keeps the fp32 accumulator at 64 registers per thread (BLOCK_N * columns / threads).
GEMV_W8_CONFIGS = ((16, 512, 4), (16, 1024, 8), (32, 512, 8), (8, 1024, 4))


@on_input_device
def gemv_w8(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int,
            config: tuple[int, int, int] = GEMV_W8_CONFIGS[0]) -> torch.Tensor:
    """x (1, K) fp16/bf16 @ (q (N, K) int8 * scale (N, K/group_size) per group)^T -> (1, N) in x's dtype
    (the W8A16 math: symmetric int8 weights, fp32 accumulation)."""
    n, k = q.shape
    g = k // group_size
    assert x.shape == (1, k) and q.is_contiguous() and scale.shape == (n, g) and scale.is_contiguous()
    x = x.contiguous()
    y = torch.empty(1, n, dtype=x.dtype, device=x.device)
    block_n, cols, warps = config
    ng = max(1, min(triton.next_power_of_2(g), cols // group_size))
    _gemv_w8[(triton.cdiv(n, block_n),)](x, q, scale, y, n, K=k, G=g, GS=group_size, BLOCK_N=block_n, NG=ng,
                                         num_warps=warps)
    return y


# ---- W8A16 for a few rows (M = 2..16): each weight tile is read once for all rows -------------------


@triton.jit
def _gemm_w8(x_ptr, q_ptr, s_ptr, y_ptr, M, N, stride_xm, K: tl.constexpr, G: tl.constexpr, GS: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BK: tl.constexpr, K_PER: tl.constexpr, SPLIT: tl.constexpr):
    """y (M, N) = x (M, K) @ (q (N, K) int8 * s (N, G))^T for M <= BLOCK_M (16, 32 or 64).

    Weights are the left operand of tl.dot ("swap AB"), so M pads only to 16. Every BK-column tile lies
    in one group (BK divides GS): its int8 values are exact in fp16/bf16, the tile's products are summed
    in fp32 by the tensor cores, then scaled by the group's scale in fp32 -- the reference's math
    (x @ (q * s)^T in fp32) up to the order of the fp32 sums.
    SPLIT: program (n, j) sums columns [j * K_PER, (j + 1) * K_PER) and stores fp32 partials at
    y_ptr + j * M * N (the caller adds them in a fixed order: deterministic); otherwise K_PER = K."""
    pid = tl.program_id(0)
    k_first = tl.program_id(1) * K_PER
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BK)
    n_mask = offs_n < N
    m_mask = offs_m < M
    rows = q_ptr + offs_n.to(tl.int64)[:, None] * K
    xrows = x_ptr + offs_m[:, None] * stride_xm
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    for kt in range(0, K_PER, BK):
        kk = k_first + kt + offs_k
        q = tl.load(rows + kk[None, :], mask=n_mask[:, None], other=0, eviction_policy="evict_first")  # (BLOCK_N, BK)
        x = tl.load(xrows + kk[None, :], mask=m_mask[:, None], other=0.0)  # (BLOCK_M, BK)
        part = tl.dot(q.to(x.dtype), tl.trans(x))  # (BLOCK_N, BLOCK_M), fp32
        sc = tl.load(s_ptr + offs_n * G + (k_first + kt) // GS, mask=n_mask, other=0.0).to(tl.float32)
        acc += part * sc[:, None]
    y = y_ptr + offs_m[None, :] * N + offs_n[:, None]
    mask = n_mask[:, None] & m_mask[None, :]
    if SPLIT:
        tl.store(y + tl.program_id(1) * M * N, acc, mask=mask)
    else:
        tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=mask)


# (BLOCK_N, num_warps, num_stages, K splits) the path table tries for `gemm_w8`; column tiles are
# min(128, group_size) wide. Measured on the H100 at M = 8 (session 3, glue/README.md), without splits:
# 32/4 warps/4 stages or 64/4/3 won every shape, but 4096 x 14336 ran at 0.9 TB/s (128 programs for
# 132 SMs, each streaming 14336 columns). The split-K configs give such shapes 4-8x the programs
# (partials in fp32, summed in a fixed order); they were added after that run and are not yet measured.
# Session 21 swept BLOCK_N {16..128} x {4, 8} warps x {3, 4} stages x {1, 4} splits at M = 16/32/64 on the 8B fused
# qkv, o, fused gate/up and down shapes (bench/results/h100/kernels_s21/call4/probe_w8a16.log) and added the three
# that won there: (64, 4, 3, 4) at 16-32 rows, (128, 8, 3, 1) / (128, 8, 3, 4) at 64 (64 rows, per layer: qkv 41.4 ->
# 25.8 us, o 30.5 -> 20.0, gate/up 102.9 -> 84.5, down 94.3 -> 47.1; fp16 20.5 / 14.6 / 87.3 / 46.3).
GEMM_W8_CONFIGS = ((16, 4, 4, 1), (32, 4, 4, 1), (64, 4, 3, 1), (32, 8, 6, 1), (32, 4, 4, 4), (64, 4, 3, 8),
                   (64, 4, 3, 4), (128, 8, 3, 1), (128, 8, 3, 4))
GEMM_W8_BK = 128
# Up to 64 rows (session 19; 16 before): above 16 the only path was dequantize + cuBLAS, which rewrites the whole
# weight in fp16 on every call. Synthetic Llama-3-8B W8A16 decode at batch 32 / 64 took 26.2 / 26.8 ms a token
# that way, against 6.9 / 7.5 ms for fp16 (H100, bench/results/h100/e2e/session19/). The row tile grows with M
# (BLOCK_M = 16, 32, 64), so every weight tile is still read once for all rows.
GEMM_W8_MAX_M = 64


def gemm_w8_fits(k: int, group_size: int, config: tuple[int, int, int, int]) -> bool:
    """Whether `config`'s K splits cut K into whole column tiles."""
    return (k // min(GEMM_W8_BK, group_size)) % config[3] == 0


@on_input_device
def gemm_w8(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int,
            config: tuple[int, int, int, int] = GEMM_W8_CONFIGS[0]) -> torch.Tensor:
    """x (M, K) fp16/bf16, M <= GEMM_W8_MAX_M, @ (q (N, K) int8 * scale (N, K/group_size))^T -> (M, N) in x's
    dtype (group_size: a power of two >= 16 dividing K, as `gemv_w8_supported`; splits: `gemm_w8_fits`)."""
    n, k = q.shape
    m = x.shape[0]
    g = k // group_size
    assert x.shape[1] == k and 1 <= m <= GEMM_W8_MAX_M and x.stride(1) == 1, (x.shape, q.shape)
    assert q.is_contiguous() and scale.shape == (n, g) and scale.is_contiguous(), (q.shape, scale.shape)
    assert gemm_w8_fits(k, group_size, config), (k, group_size, config)
    block_n, warps, stages, split = config
    bk = min(GEMM_W8_BK, group_size)
    out = torch.empty(split, m, n, dtype=torch.float32 if split > 1 else x.dtype, device=x.device)
    _gemm_w8[(triton.cdiv(n, block_n), split)](x, q, scale, out, m, n, x.stride(0), K=k, G=g, GS=group_size,
                                                BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=block_n, BK=bk, K_PER=k // split, SPLIT=split > 1,
                                                num_warps=warps, num_stages=stages)
    return out[0] if split == 1 else out.sum(0).to(x.dtype)  # (M, N); torch's sum over splits has a fixed order


# ---- int8 weight-only dequantization into a dense temporary (prefill: then cuBLAS) -------------------


@triton.jit
def _dequant_w8(q_ptr, s_ptr, z_ptr, w_ptr, N, K, G, GS, HAS_ZERO: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr):
    """w = ((q - z) * s).to(dtype) per group of GS columns (the last group may be partial), in fp32 as
    formats_ct's `_dequant_weight_only`, so the temporary is bit-identical to the torch version."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_n < N)[:, None] & (offs_k < K)[None, :]
    at = offs_n.to(tl.int64)[:, None] * K + offs_k[None, :]
    gat = offs_n[:, None] * G + offs_k[None, :] // GS
    w = tl.load(q_ptr + at, mask=mask, other=0).to(tl.float32)
    if HAS_ZERO:
        w = w - tl.load(z_ptr + gat, mask=mask, other=0).to(tl.float32)
    w = w * tl.load(s_ptr + gat, mask=mask, other=0.0).to(tl.float32)
    tl.store(w_ptr + at, w.to(w_ptr.dtype.element_ty), mask=mask)


@on_input_device
def dequant_w8(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """q (N, K) int8, scale (N, G) (+ zero (N, G) int8) -> dense (N, K) in `dtype`, groups of ceil(K / G)."""
    n, k = q.shape
    g = scale.shape[1]
    assert q.is_contiguous() and scale.shape[0] == n and (zero is None or zero.shape == scale.shape)
    scale = scale.contiguous()
    zero = None if zero is None else zero.contiguous()
    w = torch.empty(n, k, dtype=dtype, device=q.device)
    bn, bk = 32, 256
    _dequant_w8[(triton.cdiv(n, bn), triton.cdiv(k, bk))](q, scale, scale if zero is None else zero, w, n, k, g,
                                                          -(-k // g), HAS_ZERO=zero is not None, BLOCK_N=bn,
                                                          BLOCK_K=bk, num_warps=4)
    return w


# ---- residual add + RMSNorm for a few rows (decode) ------------------------------------------------


# _round_half_even, _quotient (exact fp32 v / s from an fp64 reciprocal), _int8_codes, _dp4a and _sbyte live in
# kernels/w8a8.py, shared with the W8A8 and 2:4 int8 kernels there.


@triton.jit
def _quant_row(v, offs, mask, q_ptr, s_ptr, row_q, row_s):
    """Dynamic per-token int8 of one row v (fp32 values of the activation dtype), exactly
    kernels.w8a8.quantize_per_token: s = max(max|v|, 1e-8) / 127, q = clamp(rint(v / s), -127, 127)."""
    amax = tl.max(tl.where(mask, tl.abs(v), 0.0), axis=0)
    sc = tl.math.div_rn(tl.maximum(amax, 1e-8), 127.0)
    q = _int8_codes(v, 1.0 / sc.to(tl.float64)).to(tl.int8)
    tl.store(q_ptr + row_q + offs, q, mask=mask)
    tl.store(s_ptr + row_s, sc)


@triton.jit
def _add_rms_norm_impl(x_ptr, y_ptr, w_ptr, s_ptr, h_ptr, q_ptr, qs_ptr, eps, N: tl.constexpr, BLOCK: tl.constexpr,
                       HAS_Y: tl.constexpr, QUANT: tl.constexpr, PDL: tl.constexpr):
    """One row per program, the whole row in registers: s = x + y (rounded to the activation dtype,
    as the reference adds in it), h = w * (s * rsqrt(mean(s^2) + eps)).to(dtype). QUANT: also h's
    dynamic int8 quantization (the next W8A8 projection then needs no quantizer launch of its own)."""
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
    row = pid.to(tl.int64) * N
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)  # issued first: its latency overlaps the row's loads
    if PDL:
        gdc_wait()  # the norm weight above is never written; the rows below come from the launches before
    s = tl.load(x_ptr + row + offs, mask=mask, other=0.0)
    if HAS_Y:
        s = s + tl.load(y_ptr + row + offs, mask=mask, other=0.0)
        tl.store(s_ptr + row + offs, s, mask=mask)
    sf = s.to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(sf * sf, axis=0) / N + eps)
    h = ((sf * r).to(s.dtype).to(tl.float32) * w.to(tl.float32)).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row + offs, h, mask=mask)
    if QUANT:
        _quant_row(h.to(tl.float32), offs, mask, q_ptr, qs_ptr, row, pid)


@triton.jit
def _add_rms_norm(x_ptr, y_ptr, w_ptr, s_ptr, h_ptr, q_ptr, qs_ptr, eps, N: tl.constexpr, BLOCK: tl.constexpr,
                  HAS_Y: tl.constexpr, QUANT: tl.constexpr):
    _add_rms_norm_impl(x_ptr, y_ptr, w_ptr, s_ptr, h_ptr, q_ptr, qs_ptr, eps, N, BLOCK, HAS_Y, QUANT, False)


@triton.jit
def _add_rms_norm_pdl(x_ptr, y_ptr, w_ptr, s_ptr, h_ptr, q_ptr, qs_ptr, eps, N: tl.constexpr, BLOCK: tl.constexpr,
                      HAS_Y: tl.constexpr, QUANT: tl.constexpr):
    _add_rms_norm_impl(x_ptr, y_ptr, w_ptr, s_ptr, h_ptr, q_ptr, qs_ptr, eps, N, BLOCK, HAS_Y, QUANT, True)


@on_input_device
def add_rms_norm(x: torch.Tensor, y: torch.Tensor | None, w: torch.Tensor, eps: float, quant: bool = False):
    """(x + y, rms_norm(x + y) * w) for (.., N) rows of one dtype (fastpath.add_rms_norm's math; y None:
    rms_norm(x) alone, returned as (x, h)). quant: also ((q int8 (M, N), scale fp32 (M,)) of h."""
    n = x.shape[-1]
    x2 = x.reshape(-1, n).contiguous()
    y2 = x2 if y is None else y.reshape(-1, n).contiguous()
    s = x2 if y is None else torch.empty_like(x2)
    h = torch.empty_like(x2)
    m = x2.shape[0]
    q = torch.empty(m, n, dtype=torch.int8, device=x.device) if quant else h
    qs = torch.empty(m, dtype=torch.float32, device=x.device) if quant else h
    block = triton.next_power_of_2(n)
    kernel, opts = _pick(_add_rms_norm, _add_rms_norm_pdl, x.device)
    kernel[(m,)](x2, y2, w, s, h, q, qs, eps, N=n, BLOCK=block, HAS_Y=y is not None, QUANT=quant,
                 num_warps=8 if block >= 4096 else 4, **opts)
    out = (s.reshape(x.shape), h.reshape(x.shape))
    return (*out, (q, qs)) if quant else out


@triton.jit
def _silu_mul_impl(gu_ptr, a_ptr, I: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """a = silu(gate) * up for BLOCK columns of one row [gate | up] (grid rows x column blocks), fp32 math rounded
    once to the activation dtype (the compiled glue's rounding)."""
    row = tl.program_id(0).to(tl.int64)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()  # everything read here is the previous launch's output
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < I
    g = tl.load(gu_ptr + row * 2 * I + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * I + I + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(a_ptr + row * I + offs, _silu_times(g, u).to(a_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul(gu_ptr, a_ptr, I: tl.constexpr, BLOCK: tl.constexpr):
    _silu_mul_impl(gu_ptr, a_ptr, I, BLOCK, False)


@triton.jit
def _silu_mul_pdl(gu_ptr, a_ptr, I: tl.constexpr, BLOCK: tl.constexpr):
    _silu_mul_impl(gu_ptr, a_ptr, I, BLOCK, True)


@on_input_device
def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """[gate | up] (.., 2I) -> silu(gate) * up (.., I) (fastpath.silu_mul's math) as a decode-step launch: with
    programmatic dependent launch on Hopper, so the chain of launches a decode step makes is not broken here (the
    compiled glue's inductor kernel is launched plainly: the down projection after it could not start early)."""
    i = gu.shape[-1] // 2
    g2 = gu.reshape(-1, 2 * i).contiguous()
    m = g2.shape[0]
    a = torch.empty(m, i, dtype=gu.dtype, device=gu.device)
    block = min(1024, triton.next_power_of_2(i))
    kernel, opts = _pick(_silu_mul, _silu_mul_pdl, gu.device)
    kernel[(m, triton.cdiv(i, block))](g2, a, I=i, BLOCK=block, num_warps=4, **opts)
    return a.reshape(*gu.shape[:-1], i)


@triton.jit
def _silu_mul_quant(gu_ptr, a_ptr, q_ptr, qs_ptr, I: tl.constexpr, BLOCK: tl.constexpr):
    """a = silu(gate) * up of one row [gate | up] (fp32 math, rounded once to the activation dtype, as
    the compiled glue does), and a's dynamic int8 quantization for the W8A8 down projection."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < I
    base = pid.to(tl.int64) * 2 * I
    g = tl.load(gu_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + base + I + offs, mask=mask, other=0.0).to(tl.float32)
    a = _silu_times(g, u).to(a_ptr.dtype.element_ty)
    tl.store(a_ptr + pid.to(tl.int64) * I + offs, a, mask=mask)
    _quant_row(a.to(tl.float32), offs, mask, q_ptr, qs_ptr, pid.to(tl.int64) * I, pid)


@on_input_device
def silu_mul_quant(gu: torch.Tensor):
    """[gate | up] (.., 2I) -> (silu(gate) * up (.., I), (q int8 (M, I), scale fp32 (M,)))."""
    i = gu.shape[-1] // 2
    g2 = gu.reshape(-1, 2 * i).contiguous()
    m = g2.shape[0]
    a = torch.empty(m, i, dtype=gu.dtype, device=gu.device)
    q = torch.empty(m, i, dtype=torch.int8, device=gu.device)
    qs = torch.empty(m, dtype=torch.float32, device=gu.device)
    block = triton.next_power_of_2(i)
    _silu_mul_quant[(m,)](g2, a, q, qs, I=i, BLOCK=block, num_warps=16 if block >= 16384 else (8 if block >= 4096 else 4))
    return a.reshape(*gu.shape[:-1], i), (q, qs)


# ---- W8A8 GEMV on pre-quantized activations (int8 x int8, int32 accumulation) -----------------------


@triton.jit
def _x_float_words(x_ptr, ww, byte, w_mask, K: tl.constexpr, SILU: tl.constexpr):
    """fp32 values (BLOCK_W, 4) of activation words ww (4 elements each). SILU: x_ptr holds [gate | up]
    (2K values) and x = silu(gate) * up in fp32, rounded to the activation dtype: `_silu_mul_quant`'s
    expression, so the int8 codes are the same."""
    idx = ww[:, None] * 4 + byte[None, :]
    xv = tl.load(x_ptr + idx, mask=w_mask[:, None], other=0.0)
    if SILU:
        g = xv.to(tl.float32)
        u = tl.load(x_ptr + K + idx, mask=w_mask[:, None], other=0.0).to(tl.float32)
        xv = _silu_times(g, u).to(x_ptr.dtype.element_ty)
    return xv.to(tl.float32)


@triton.jit
def _gemv_i8_impl(xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, N, KW: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_W: tl.constexpr, USE_ASM: tl.constexpr, X_FLOAT: tl.constexpr, SILU: tl.constexpr,
                  PDL: tl.constexpr):
    """y[n] = (sum_k q_w[n,k] q_x[k]) * s_w[n] * s_x for one token, the W8A8 math of kernels/w8a8.py
    (exact int32 products and sums, then the same fp32 scaling). Weights and activations are read as
    int32 words of 4 bytes (KW = K / 4 words); the 4 products of a word pair are one dp4a on the GPU
    (USE_ASM), byte shifts in the CPU interpreter.
    X_FLOAT: xq_ptr holds the fp16/bf16 activations instead, and every program quantizes them itself
    (the row's absmax first: K values read from L2), so no quantizer launch precedes the GEMV.
    SILU (with X_FLOAT): xq_ptr holds [gate | up] and x = silu(gate) * up (the down projection: the
    separate silu * up + quantize launch, 6.6 us per layer on the H100 at K = 14336, disappears).

    The weight tiles are double-buffered in registers: tile i + 1 is requested before tile i is summed,
    and tile i + 2 right after, so loads stay in flight while the activation words of a tile go through
    shared memory (a layout change with a barrier, which used to hold the next tile's loads back: one
    tile in flight per program, and none during the barrier). The first two tiles are requested before
    `gdc_wait` (PDL): weights are never written during a decode step, so with PDL they stream in while
    the kernels before this one (norm, attention) still run. Measured on the H100 (session4_w8a8/): without
    PDL this loop is slower than session 3's one tile per step; with PDL it is the fastest tried (session
    3's loop with PDL and an L2 prefetch of the first tiles instead: TPOT 3.661 vs 3.393 ms)."""
    pid = tl.program_id(0)
    if PDL:
        gdc_launch_dependents()
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_w = tl.arange(0, BLOCK_W)
    n_mask = offs_n < N
    rows = w_ptr + offs_n.to(tl.int64)[:, None] * KW
    byte = tl.arange(0, 4)
    w = tl.load(rows + offs_w[None, :], mask=n_mask[:, None] & (offs_w < KW)[None, :], other=0,
                eviction_policy="evict_first")
    nxt = BLOCK_W + offs_w
    w_next = tl.load(rows + nxt[None, :], mask=n_mask[:, None] & (nxt < KW)[None, :], other=0,
                     eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    if X_FLOAT:
        amax = tl.zeros([BLOCK_W, 4], tl.float32)
        for w0 in range(0, KW, BLOCK_W):
            ww = w0 + offs_w
            amax = tl.maximum(amax, tl.abs(_x_float_words(xq_ptr, ww, byte, ww < KW, KW * 4, SILU)))
        sx = tl.math.div_rn(tl.maximum(tl.max(tl.max(amax, axis=1), axis=0), 1e-8), 127.0)
        inv_sx = 1.0 / sx.to(tl.float64)
    else:
        sx = tl.load(xs_ptr)
    acc = tl.zeros([BLOCK_N, BLOCK_W], tl.int32)
    for w0 in range(0, KW, BLOCK_W):
        ww = w0 + offs_w
        w_mask = ww < KW
        if X_FLOAT:
            xv = _x_float_words(xq_ptr, ww, byte, w_mask, KW * 4, SILU)
            q = _int8_codes(xv, inv_sx).to(tl.int32)
            x = tl.sum((q & 0xFF) << (byte * 8)[None, :], axis=1)  # 4 int8 -> one int32 word (disjoint bits)
        else:
            x = tl.load(xq_ptr + ww, mask=w_mask, other=0)
        xb = tl.broadcast_to(x[None, :], [BLOCK_N, BLOCK_W])
        if USE_ASM:
            acc = _dp4a(w, xb, acc)
        else:
            for i in tl.static_range(4):
                acc += _sbyte(w, i) * _sbyte(xb, i)
        # Tile i is summed: its registers take tile i + 2, so tile i + 1 (requested one iteration ago)
        # and tile i + 2 are in flight while tile i + 1 is summed.
        w = w_next
        nxt = ww + 2 * BLOCK_W
        w_next = tl.load(rows + nxt[None, :], mask=n_mask[:, None] & (nxt < KW)[None, :], other=0,
                         eviction_policy="evict_first")
    tot = tl.sum(acc, axis=1)
    sw = tl.load(ws_ptr + offs_n, mask=n_mask, other=0.0)
    y = tot.to(tl.float32) * sw * sx
    tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty), mask=n_mask)


@triton.jit
def _gemv_i8(xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, N, KW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr,
             USE_ASM: tl.constexpr, X_FLOAT: tl.constexpr, SILU: tl.constexpr):
    _gemv_i8_impl(xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, N, KW, BLOCK_N, BLOCK_W, USE_ASM, X_FLOAT, SILU, False)


@triton.jit
def _gemv_i8_pdl(xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, N, KW: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_W: tl.constexpr, USE_ASM: tl.constexpr, X_FLOAT: tl.constexpr, SILU: tl.constexpr):
    _gemv_i8_impl(xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, N, KW, BLOCK_N, BLOCK_W, USE_ASM, X_FLOAT, SILU, True)


# (BLOCK_N, BLOCK_W words, num_warps) the path table tries. Session 3's H100 choices were among the first
# three; the double-buffered kernel holds two tiles per program, so a narrower tile with more programs
# (8x512/4) and a wider one with more warps (32x256/8) are offered too.
GEMV_I8_CONFIGS = ((16, 256, 4), (32, 128, 4), (16, 512, 8), (8, 512, 4), (32, 256, 8))


@on_input_device
def gemv_i8(xq: torch.Tensor, xs: torch.Tensor | None, w: torch.Tensor, w_scale: torch.Tensor, dtype: torch.dtype,
            config: tuple[int, int, int] = GEMV_I8_CONFIGS[0], silu_mul: bool = False) -> torch.Tensor:
    """One token's pre-quantized activations xq (1, K) int8 with scale xs (1,) fp32 -- or, with xs None,
    the fp16/bf16 activations xq (1, K), quantized inside -- times int8 weights w (N, K) with per-channel
    w_scale (N,) fp32 -> (1, N) in `dtype` (K a multiple of 4). silu_mul (xs None): xq is (1, 2K) =
    [gate | up] and the activations are silu(gate) * up, exactly as `silu_mul_quant` rounds them."""
    n, k = w.shape
    assert xs is None or not silu_mul
    assert xq.shape == (1, 2 * k if silu_mul else k) and k % 4 == 0 and w.is_contiguous(), (xq.shape, w.shape)
    xq = xq.contiguous()
    x_float = xs is None
    y = torch.empty(1, n, dtype=dtype, device=w.device)
    bn, bw, warps = config
    kw = k // 4
    bw = min(bw, triton.next_power_of_2(kw))
    interp = os.environ.get("TRITON_INTERPRET", "0") == "1"  # the CPU interpreter runs no inline asm
    kernel, opts = _pick(_gemv_i8, _gemv_i8_pdl, w.device)
    kernel[(triton.cdiv(n, bn),)](xq if x_float else xq.view(torch.int32), w_scale if x_float else xs,
                                  w.view(torch.int32), w_scale.reshape(-1), y, n, KW=kw, BLOCK_N=bn, BLOCK_W=bw,
                                  USE_ASM=not interp, X_FLOAT=x_float, SILU=silu_mul, num_warps=warps, **opts)
    return y


def attention_reference(q, k, v, cos, sin, k_cache, v_cache, pos: int, scale: float, q_norm=None, k_norm=None,
                        eps: float = 1e-6) -> torch.Tensor:
    """Plain-torch twin of DecodeAttention (float32 math; writes the cache the same way), for tests."""
    b, hkv, _, d = k_cache.shape
    h = q.shape[1] // d
    qh, kh = q.reshape(b, h, d).float(), k.reshape(b, hkv, d).float()
    if q_norm is not None:
        qh = (qh * torch.rsqrt(qh.pow(2).mean(-1, keepdim=True) + eps)).to(q.dtype).float() * q_norm.float()
        kh = (kh * torch.rsqrt(kh.pow(2).mean(-1, keepdim=True) + eps)).to(q.dtype).float() * k_norm.float()

    def rot(t):
        return torch.cat((-t[..., d // 2:], t[..., : d // 2]), dim=-1)

    c, s = cos.float(), sin.float()
    qh = (qh.to(q.dtype).float() * c + rot(qh.to(q.dtype).float()) * s).to(q.dtype)
    kh = (kh.to(q.dtype).float() * c + rot(kh.to(q.dtype).float()) * s).to(q.dtype)
    k_cache[:, :, pos] = kh
    v_cache[:, :, pos] = v.reshape(b, hkv, d)
    keys = k_cache[:, :, : pos + 1].float().repeat_interleave(h // hkv, dim=1)
    vals = v_cache[:, :, : pos + 1].float().repeat_interleave(h // hkv, dim=1)
    probs = torch.softmax(torch.einsum("bhd,bhld->bhl", qh.float(), keys) * scale, dim=-1)
    return torch.einsum("bhl,bhld->bhd", probs, vals).reshape(b, h * d).to(q.dtype)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
