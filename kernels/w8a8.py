"""W8A8: per-channel int8 weights, dynamic per-token int8 activations, int8 tensor-core GEMM.

Math (per token m, output channel n):
    s_x[m] = max(max_k |x[m, k]|, 1e-8) / 127,   q_x[m, k] = clamp(rint(x[m, k] / s_x[m]), -127, 127)
    y[m, n] = (sum_k q_x[m, k] * w[n, k]) * s_x[m] * s_w[n]          (int32 accumulation)

Kernels:
- `_quant_row_kernel` quantizes x once (one token per program, the row in registers; rows longer than
  ROW_KERNEL_MAX_K use the blocked `_quant_per_token_kernel`), then `_w8a8_kernel` runs the int8 tensor-core
  GEMM on int8 activations. Weights are the left operand ("swap AB"), so M = 1..16 pads only to 16. With
  `pdl` in the config the GEMM is launched with programmatic dependent launch: it prefetches its first weight
  bytes into L2 while the quantizer runs and waits (griddepcontrol.wait) before reading x.
  With "qwait" the quantizer is launched that way too: it waits for the kernel before it, so only its launch
  overlaps that kernel's end (session 13: the default up to 16 tokens).
- `_w8a8_kernel` with QUANT_IN_KERNEL (config "fused": True): session 2's single-launch form (each program
  scans its rows for the absmax and quantizes tiles in registers), kept for the sweeps.
- M = 3..16 (session 8, `_config_s8`): `_w8a8_kernel` with K split only as far as one program per SM ("fit") and a
  deeper pipeline where that grid fits the SMs ("deep"); bench/results/h100/kernels_s8_w8a8/ says where a call's
  microseconds go (quantizer alone, GEMM alone).
- M >= 65 (session 14, `_config_wide`): 8 warps, tiles by the layer's shape (128 x 256 where they fill the GPU,
  else 64 x 128), K split only where the tiles leave SMs idle and K > 8192.
- `_gemv_tokens_kernel` with X_FLOAT (config "xf"): one launch, each program quantizes the few tokens itself
  (measured slower than quantizer + GEMV at M = 2..8, session 8; kept opt-in).
- config kind "tma": kernels/w8a8_gemm_tma.py's TMA / persistent GEMM on the quantized x (opt-in; it lost to
  `_w8a8_kernel` where measured, session 7) -- a weight TMA cannot describe falls back to `_w8a8_kernel`.
torch._int_mm needs M > 16; these kernels take any M.

Public: `w8a8_linear`, `quantize_per_token` (+ `*_ref` plain-torch twins).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from compress.errors import CompressError
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from kernels import w8a8_gemm_tma
from kernels._common import (check_activation, check_device, config_chain, config_chunks, interpreting, num_sms,
                             pdl_enabled, pow2_floor, splitk_buffers, swap_ab_pids, swap_ab_store, tuned_config)
from kernels.op_dispatch import direct_call, on_input_device

ACT_EPS = 1e-8
# Above this M, quantize activations in a separate pass (see module docstring).
FUSED_QUANT_MAX_M = 16


@triton.jit
def _round_half_even(v):
    # Adding and removing 1.5 * 2^23 rounds an fp32 |v| < 2^22 to the nearest integer, ties to even,
    # exactly like torch.round (and works in the CPU interpreter, unlike libdevice.rint).
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _quotient(v, inv_s):
    """fp32 v / s, bit for bit the IEEE fp32 division, from inv_s = 1 / s computed once in fp64
    (`1.0 / s.to(tl.float64)`): no division per element (each is a branchy instruction sequence; 16 of
    them in a row were on the runtime's quantizing norm's critical path).

    Why it is exact: v / s is never an fp32 rounding midpoint and lies at least 2^-49 (relative) from
    every midpoint (v has 24 significant bits, s * midpoint at least 25 with an odd last one, so their
    difference is a nonzero multiple of 2^-48 relative), while v * inv_s in fp64 is within 2^-52 of v / s:
    rounding it to fp32 gives the correctly rounded quotient. (Checked: every finite fp16 v against
    3001 scales, 190 M quotients, no difference; tests/test_glue_kernels.py checks it in a kernel.)"""
    return (v.to(tl.float64) * inv_s).to(tl.float32)


@triton.jit
def _int8_codes(v, inv_s):
    """clamp(rint(v / s), -127, 127), ties to even, with `_quotient`'s exact v / s."""
    return tl.minimum(tl.maximum(_round_half_even(_quotient(v, inv_s)), -127.0), 127.0)


@triton.jit
def _row_scales(x_ptr, offs_m, m_mask, stride_xm, K, BK: tl.constexpr, EPS: tl.constexpr):
    """Per-token scale s_x = max(absmax, EPS) / 127 over the full row (fp32). BK is wide (up to 2048)
    because the loop is a chain of dependent-latency loads: with BK=128 a K=4096 row took 32 round
    trips before the GEMM could start (W8A8 M=1 measured 0.97x of fp16)."""
    offs_k = tl.arange(0, BK)
    amax = tl.zeros([offs_m.shape[0]], dtype=tl.float32)
    for k0 in range(0, K, BK):
        xt = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :],
                     mask=m_mask[:, None] & ((k0 + offs_k) < K)[None, :], other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(xt.to(tl.float32)), axis=1))
    return tl.math.div_rn(tl.maximum(amax, EPS), 127.0)


@triton.jit
def _quantize_tile(xt, sx):
    """fp16/bf16 tile and broadcastable fp32 scales -> int8 tile (same rounding as the reference)."""
    q = _round_half_even(tl.math.div_rn(xt.to(tl.float32), sx))
    return tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int8)


@triton.jit
def _quant_per_token_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_qm, BM: tl.constexpr, BK: tl.constexpr,
                            EPS: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    sx = _row_scales(x_ptr, offs_m, m_mask, stride_xm, K, BK, EPS)
    offs_k = tl.arange(0, BK)
    for k0 in range(0, K, BK):
        mask = m_mask[:, None] & ((k0 + offs_k) < K)[None, :]
        xt = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :], mask=mask, other=0.0)
        tl.store(q_ptr + offs_m[:, None] * stride_qm + (k0 + offs_k)[None, :], _quantize_tile(xt, sx[:, None]), mask=mask)
    tl.store(s_ptr + offs_m, sx, mask=m_mask)


@triton.jit
def _w8a8_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16 when QUANT_IN_KERNEL, else int8
    sx_ptr,  # (M,) fp32 token scales (read when not QUANT_IN_KERNEL)
    w_ptr,  # (N, K) int8
    sw_ptr,  # (N,) channel scales
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    K_PER_SPLIT,  # multiple of BK
    S,
    # strides
    stride_xm,
    stride_wn,
    stride_om,
    # meta
    QUANT_IN_KERNEL: tl.constexpr,
    EPS: tl.constexpr,
    BN: tl.constexpr,
    BM: tl.constexpr,
    BK: tl.constexpr,
    PRO_BK: tl.constexpr,  # columns per step of the absmax prologue
    PDL_PREFETCH: tl.constexpr = 0,  # > 0: launched with programmatic dependent launch; prefetch this many bytes
                                     # of each weight row into L2, then wait for the quantization kernel
    M_FAST: tl.constexpr = False,  # grid (m tiles, n tiles, split): the token tiles of one weight tile run side by
                                   # side, so its weights come from DRAM once and from L2 for the other token tiles
    CHAIN: tl.constexpr = 0,  # let a kernel launched after this one with PDL start early (config "chain"): 1 at this
                              # program's start, 2 ("late") once its K loop is done (only the epilogue is left)
    ROUND: tl.constexpr = 1,  # split-K partials summed per round (splitk_epilogue): session 12's A/B of 4 (config "round")
):
    pid_m, pid_n = swap_ab_pids(M_FAST)
    pid_s = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    offs_k = tl.arange(0, BK)
    if CHAIN == 1:
        gdc_launch_dependents()  # the next call's quantizer (chain) may launch now; it waits for this grid
    if PDL_PREFETCH > 0:
        # The weights do not depend on the previous kernel (the quantizer, or with QUANT_IN_KERNEL whatever wrote x):
        # start streaming them into L2 while it runs.
        lines = tl.minimum(pid_s * K_PER_SPLIT + tl.arange(0, PDL_PREFETCH // 128) * 128, K - 1)
        pf = w_ptr + tl.minimum(offs_n, N - 1)[:, None] * stride_wn + lines[None, :]  # clamped: never past the weight
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pf], dtype=tl.int32, is_pure=False,
                                  pack=1)
        gdc_wait()

    if QUANT_IN_KERNEL:
        sx = _row_scales(x_ptr, offs_m, m_mask, stride_xm, K, PRO_BK, EPS)  # (BM,)
    else:
        sx = tl.load(sx_ptr + offs_m, mask=m_mask, other=0.0)

    k_start = pid_s * K_PER_SPLIT
    acc = tl.zeros([BN, BM], dtype=tl.int32)
    for kk in range(0, K_PER_SPLIT, BK):
        k0 = k_start + kk
        k_mask = (k0 + offs_k) < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + (k0 + offs_k)[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0)
        xt_ptrs = x_ptr + offs_m[None, :] * stride_xm + (k0 + offs_k)[:, None]  # (BK, BM): x^T tile
        xt = tl.load(xt_ptrs, mask=k_mask[:, None] & m_mask[None, :], other=0)
        if QUANT_IN_KERNEL:
            xt = _quantize_tile(xt, sx[None, :])
        acc = tl.dot(w, xt, acc, out_dtype=tl.int32)  # (BN, BK) @ (BK, BM)
    if CHAIN == 2:
        gdc_launch_dependents()  # every weight byte is read: the next call's quantizer may launch (it waits for us)

    sw = tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    out = acc.to(tl.float32) * sw[:, None] * sx[None, :]
    swap_ab_store(out, out_ptr, stride_om, offs_n, n_mask, offs_m, m_mask, ws_ptr, lock_ptr, pid_n, pid_m, pid_s, S, N,
                  BN, BM, ROUND)


@triton.jit
def _quant_row_kernel(x_ptr, q_ptr, s_ptr, K, stride_xm, stride_qm, BK: tl.constexpr, EPS: tl.constexpr,
                      EARLY: tl.constexpr, WAIT: tl.constexpr = False, RECIP: tl.constexpr = False,
                      CHUNK: tl.constexpr = 0):
    """One token per program, the whole row in registers: a single read of x (one memory round trip
    before the GEMM can start, where the blocked loop of `_quant_per_token_kernel` needs two per chunk).
    EARLY: let a kernel launched after this one with programmatic dependent launch start right away (it
    prefetches its weights, then waits for this grid before reading x).
    WAIT: this kernel is itself launched with programmatic dependent launch ("chain"): it may start while the
    kernel before it still runs, and waits for it (griddepcontrol.wait) before its first load or store -- so
    only the launch latency overlaps, never a read of x before it is written or a write of a buffer still read.
    RECIP (config "qrecip"): the codes through `_int8_codes` (x times the fp64 reciprocal of s, the same codes bit for
    bit) instead of one IEEE division per element. Session 8 measured this kernel at 5.6 / 7.0 us for 16 rows of
    14336 / 28672 and 21.7 us for 256 rows of 28672 (bench/results/h100/kernels_s8_w8a8/); the division sequence
    is the suspect. Not timed yet, so off by default.
    CHUNK > 0 (config "qchunk", session 13; grid (M, cdiv(K, CHUNK))): every program still takes the absmax of the whole
    row, but writes the codes of one CHUNK of it. The codes cost ~0.17 us per 1024 columns on one SM (the fp64
    reciprocal path), so a long row (8B down: 14336) spreads them over several SMs; the same codes bit for bit.
    Measured behind the GEMM at 4..16 tokens (H100, bench/results/h100/kernels_s13/README.md, call 12): 70B down 1-2%
    faster with 4096-column chunks, 8B down (the row it was for) not faster, 70B k/v at 4 tokens 6% slower; off by
    default."""
    if EARLY:
        gdc_launch_dependents()
    if WAIT:
        gdc_wait()
    m = tl.program_id(0)
    offs_k = tl.arange(0, BK)
    mask = offs_k < K
    xt = tl.load(x_ptr + m * stride_xm + offs_k, mask=mask, other=0.0).to(tl.float32)
    sx = tl.math.div_rn(tl.maximum(tl.max(tl.abs(xt), axis=0), EPS), 127.0)
    if CHUNK > 0:  # this program's columns only, read again (from L1 / L2)
        c = tl.program_id(1)
        offs_k = c * CHUNK + tl.arange(0, CHUNK)
        mask = offs_k < K
        xt = tl.load(x_ptr + m * stride_xm + offs_k, mask=mask, other=0.0).to(tl.float32)
    if RECIP:
        q = _int8_codes(xt, 1.0 / sx.to(tl.float64)).to(tl.int8)
    else:
        q = tl.minimum(tl.maximum(_round_half_even(tl.math.div_rn(xt, sx)), -127.0), 127.0).to(tl.int8)
    tl.store(q_ptr + m * stride_qm + offs_k, q, mask=mask)
    if CHUNK == 0 or tl.program_id(1) == 0:
        tl.store(s_ptr + m, sx)


@triton.jit
def _dp4a(a, b, c):
    """c + sum of the four signed byte products of int32 words a and b (the dp4a instruction)."""
    return tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, c], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _sbyte(w, i: tl.constexpr):
    return (w << (24 - 8 * i)) >> 24  # arithmetic shift: byte i of w, sign-extended


@triton.jit
def _token_words(x_ptr, offs_t, t_mask, ww, stride_x, KW, inv_sx):
    """int32 words (MT, BW) of the int8 codes of tokens offs_t at words ww, quantized here from the fp16/bf16
    activations (4 values per word, byte i = element 4w + i) with the tokens' exact reciprocal scales inv_sx (MT,)
    fp64: `_int8_codes`, so the codes are `quantize_per_token`'s bit for bit."""
    byte = tl.arange(0, 4)
    v = tl.load(x_ptr + offs_t[:, None, None] * stride_x + (ww[None, :, None] * 4 + byte[None, None, :]),
                mask=t_mask[:, None, None] & (ww < KW)[None, :, None], other=0.0).to(tl.float32)
    q = _int8_codes(v, inv_sx[:, None, None]).to(tl.int32)
    return tl.sum((q & 0xFF) << (byte * 8)[None, None, :], axis=2)  # 4 int8 -> one word (disjoint bits: no carries)


@triton.jit
def _token_scales(x_ptr, offs_t, t_mask, offs_w, stride_x, KW, BW: tl.constexpr, EPS: tl.constexpr):
    """Per-token scales s_x (MT,) fp32 of the fp16/bf16 rows: max(absmax, EPS) / 127, as `quantize_per_token`."""
    byte = tl.arange(0, 4)
    amax = tl.zeros([offs_t.shape[0], BW, 4], tl.float32)
    for w0 in range(0, KW, BW):
        ww = w0 + offs_w
        v = tl.load(x_ptr + offs_t[:, None, None] * stride_x + (ww[None, :, None] * 4 + byte[None, None, :]),
                    mask=t_mask[:, None, None] & (ww < KW)[None, :, None], other=0.0)
        amax = tl.maximum(amax, tl.abs(v.to(tl.float32)))
    return tl.math.div_rn(tl.maximum(tl.max(tl.max(amax, axis=2), axis=1), EPS), 127.0)


@triton.jit
def _gemv_tokens_kernel(
    xq_ptr,  # (M, K/4) int32 view of the int8 activations (quantize_per_token); X_FLOAT: the (M, K) fp16/bf16 x
    sx_ptr,  # (M,) fp32 token scales (unused with X_FLOAT)
    w_ptr,  # (N, K/4) int32 view of the int8 weights
    sw_ptr,  # (N,) channel scales
    out_ptr,  # (M, N)
    M,
    N,
    stride_xw,  # x row stride in elements of xq_ptr (int32 words; X_FLOAT: fp16/bf16 values)
    stride_om,
    KW,  # K / 4 (a multiple of 4: K is one of 16)
    MT: tl.constexpr,  # tokens per program, a power of two >= M
    BN: tl.constexpr,
    BW: tl.constexpr,  # words of K per step
    USE_ASM: tl.constexpr,
    PDL: tl.constexpr,
    CHAIN: tl.constexpr = 0,
    X_FLOAT: tl.constexpr = False,
    EPS: tl.constexpr = 1e-8,
):
    """Few-token int8 GEMV (dp4a): y[m, n] = (sum_k q_x[m, k] w[n, k]) * s_w[n] * s_x[m] for all M tokens of the
    call in one program per BN output rows, no split-K. Each weight word is read once from DRAM and multiplied
    with the M tokens' words in registers (a (BN, MT, BW) int32 accumulator). The weight tiles are double-buffered:
    tile i + 1 is in flight while tile i is summed, and the first two are requested before `gdc_wait` (PDL: they
    stream in while the kernel before runs; weights are never written by it).
    X_FLOAT (config "xf"): no quantizer launch: every program reads the M fp16/bf16 rows from L2 for their absmax,
    then quantizes each step's x words in registers (the runtime's one-token `gemv_i8` does this and streams
    ~2.85 TB/s on the H100, session 5). CHAIN: 1 lets a kernel launched after this one with PDL start at once
    (it prefetches its weights, then waits for this grid), 2 only once this program's weights are all read."""
    pid = tl.program_id(0)
    if CHAIN == 1:
        gdc_launch_dependents()
    offs_n = pid * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_t = tl.arange(0, MT)
    t_mask = offs_t < M
    offs_w = tl.arange(0, BW)
    rows = w_ptr + offs_n.to(tl.int64)[:, None, None] * KW  # (BN, 1, 1)
    w = tl.load(rows + offs_w[None, None, :], mask=n_mask[:, None, None] & (offs_w < KW)[None, None, :], other=0,
                eviction_policy="evict_first")
    nxt = BW + offs_w
    w_next = tl.load(rows + nxt[None, None, :], mask=n_mask[:, None, None] & (nxt < KW)[None, None, :], other=0,
                     eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    if X_FLOAT:
        sx = _token_scales(xq_ptr, offs_t, t_mask, offs_w, stride_xw, KW, BW, EPS)  # (MT,)
        inv_sx = 1.0 / sx.to(tl.float64)
    else:
        sx = tl.load(sx_ptr + offs_t, mask=t_mask, other=0.0)
        inv_sx = sx.to(tl.float64)  # unused
    xrow = xq_ptr + offs_t[None, :, None] * stride_xw  # (1, MT, 1)
    acc = tl.zeros([BN, MT, BW], tl.int32)
    for w0 in range(0, KW, BW):
        ww = w0 + offs_w
        if X_FLOAT:
            x = _token_words(xq_ptr, offs_t, t_mask, ww, stride_xw, KW, inv_sx)[None, :, :]  # (1, MT, BW)
        else:
            x = tl.load(xrow + ww[None, None, :], mask=t_mask[None, :, None] & (ww < KW)[None, None, :], other=0)
        wb = tl.broadcast_to(w, [BN, MT, BW])
        xb = tl.broadcast_to(x, [BN, MT, BW])
        if USE_ASM:
            acc = _dp4a(wb, xb, acc)
        else:  # the CPU interpreter runs no inline asm
            for i in tl.static_range(4):
                acc += _sbyte(wb, i) * _sbyte(xb, i)
        w = w_next
        nxt = ww + 2 * BW
        w_next = tl.load(rows + nxt[None, None, :], mask=n_mask[:, None, None] & (nxt < KW)[None, None, :], other=0,
                         eviction_policy="evict_first")
    if CHAIN == 2:
        gdc_launch_dependents()
    tot = tl.sum(acc, axis=2)  # (BN, MT) exact int32
    sw = tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    y = tot.to(tl.float32) * sw[:, None] * sx[None, :]  # the GEMM kernel's order: acc * s_w * s_x
    tl.store(out_ptr + offs_t[None, :] * stride_om + offs_n[:, None], y.to(out_ptr.dtype.element_ty),
             mask=n_mask[:, None] & t_mask[None, :])


# Rows up to this length are quantized by `_quant_row_kernel` (the row fits in the registers of a CTA).
ROW_KERNEL_MAX_K = 32768


@on_input_device
def quantize_per_token(x: torch.Tensor, early: bool = False, chain: bool = False,
                       recip: bool = False, warps: int | None = None, chunk: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) fp16/bf16 -> (int8 (M, K), fp32 scales (M,)) with the module's rounding. early: the next
    kernel is launched with programmatic dependent launch and may start before this one ends. chain: this
    kernel is launched that way too (it waits for the kernel before it; see `_quant_row_kernel`). recip: codes
    from the exact fp64 reciprocal instead of a division per element (same bits; `_quant_row_kernel`'s RECIP). warps:
    the row kernel's warps (default by row length: 4 up to 4096, 8 up to 16384, else 16; config key "qwarps"; 4 to 32
    warps timed within 0.1 us of the default from 8192 columns on, session 13 call 11). chunk:
    columns whose codes one program writes (a power of two; 0: the whole row; config key "qchunk")."""
    check_device("quantize_per_token", x)
    for name, v, allowed in (("warps", warps or 4, "1, 2, 4, 8, 16 or 32"), ("chunk", chunk or 1, "0 or a power of two")):
        if v < 1 or v & (v - 1) or (name == "warps" and v > 32):
            raise CompressError(f"quantize_per_token: {name}={v} is not {allowed} (config key \"q{name}\"); pick one")
    x2 = check_activation("quantize_per_token", x, x.shape[-1])
    m, k = x2.shape
    q = torch.empty(m, k, dtype=torch.int8, device=x.device)
    s = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0:
        return q, s
    if k <= ROW_KERNEL_MAX_K:
        bk = triton.next_power_of_2(k)
        chain = chain and not interpreting()
        chunk = chunk if 0 < chunk < k else 0
        _quant_row_kernel[(m, triton.cdiv(k, chunk) if chunk else 1)](
                                x2, q, s, k, x2.stride(0), q.stride(0), BK=bk, EPS=ACT_EPS, EARLY=early and not interpreting(),
                                WAIT=chain, RECIP=recip, CHUNK=chunk,
                                num_warps=warps or (4 if bk <= 4096 else (8 if bk <= 16384 else 16)),
                                **({"launch_pdl": True} if chain else {}))
        return q, s
    bm = 4
    _quant_per_token_kernel[(triton.cdiv(m, bm),)](x2, q, s, m, k, x2.stride(0), q.stride(0), BM=bm,
                                                   BK=min(2048, triton.next_power_of_2(k)), EPS=ACT_EPS, num_warps=8)
    return q, s


def quantize_per_token_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.reshape(-1, x.shape[-1]).float()
    # 127 as a tensor on x's device: on CUDA, torch divides by a Python scalar as a multiply by its reciprocal,
    # which is not the IEEE quotient the kernels (div_rn) and the CPU compute, and differs by an ulp on some rows.
    s = xf.abs().amax(dim=-1).clamp(min=ACT_EPS) / torch.full((), 127.0, device=xf.device)
    q = torch.round(xf / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s


def _check(x, weight, w_scale):
    what = "w8a8_linear"
    check_device(what, x, weight, w_scale)
    if weight.dtype != torch.int8 or weight.dim() != 2:
        raise CompressError(f"{what}: weight must be int8 (N, K), got {weight.dtype} {tuple(weight.shape)}")
    n, k = weight.shape
    if w_scale.numel() != n:
        raise CompressError(f"{what}: w_scale has {w_scale.numel()} elements, expected one per output channel (N={n})")
    if k % 16 != 0:
        raise CompressError(f"{what}: in_features={k} must be a multiple of 16 for the int8 tensor-core path; pad the layer")
    return n, k


def _config(m: int, n: int = 0, k: int = 0, sms: int = 132) -> dict:
    """Kernel and tiles by M (and above 16 tokens by the layer's N x K and the GPU's SM count). Every M quantizes x
    once (`quantize_per_token`). M = 3..16: `_config_s8` (session 8's grid for session 5's GEMM). M <= 2
    (`_config_table`; session 5's 3..16 in `_config_pointer_gemm`): the winners of session 5's H100 sweep under
    rotating timing (`python -m compress.bench.kernel_tune --final w8a8`, bench/results/h100/kernels_s5/: median
    speedup over fp16 on the 8 Llama-3 shapes: M = 2 few-token GEMV 1.79x (GEMM 1.60x); M = 8 and 16 GEMM with one
    wave 1.60x (the two-wave tiles before: 1.41x)). With the layer's shape: 3..4 tokens on at most 4096 rows the
    few-token GEMV (session 18, GEMV_SMALL), 17..64 `_config_mid` and 65+
    `_config_wide`; without it (n = 0) `_config_table`: session 3's sweep at 17..64 (bench/results/h100/kernels/
    tuned.json), session 5's 256-token tiles above.
    COMPRESS_KERNEL_CONFIGS (kernels._common.tuned_config) overrides it per M bucket under the key "w8a8", or for
    one M under "w8a8@<M>" ({"w8a8@4": {"16": config}}: the M buckets 2..16 share one entry, the W8A8 sweeps pick
    per M)."""
    tuned = tuned_config(f"w8a8@{m}", m) or tuned_config("w8a8", m)  # an exact-M entry first (see below)
    if tuned:
        return tuned
    return _config_builtin(m, n, k, sms)


# Session 18 (bench/results/h100/kernels_s18/, call 8; `kernels_s13/w8a8_sweep.py`, one process, H100): at 3 and 4
# tokens the few-token GEMV, which reads each weight word once for all tokens, beats the GEMM on the layers of at
# most 4096 output rows: 8B q/o 10.83 -> 8.64 us, 8B k/v 6.94 -> 4.26, 70B k/v 8.40 -> 6.18 at M = 4 (8B down even:
# 25.15 / 25.04); 70B q/o (8192 rows) stays on the GEMM (26.2 vs 28.3). From 8 tokens its per-token work loses
# everywhere (8B q/o at M = 8 12.15 vs 10.83 us).
GEMV_SMALL_MAX_M = 4
GEMV_SMALL_MAX_N = 4096
GEMV_SMALL = {"kind": "gemv", "num_warps": 4, "pdl": 1, "qwait": True, "qrecip": True}


def _config_builtin(m: int, n: int = 0, k: int = 0, sms: int = 132) -> dict:
    """`_config` without COMPRESS_KERNEL_CONFIGS."""
    if 2 < m <= GEMV_SMALL_MAX_M and n and n <= GEMV_SMALL_MAX_N:
        return dict(GEMV_SMALL)
    if 2 < m <= 16:
        return _config_s8(m)
    if m > 16 and n and k:
        return _config_wide(m, n, k, sms) if m >= WIDE_MIN_M else _config_mid(m, n, sms)
    return _config_table(m)


def _gemm_fallback(m: int, n: int, k: int, device: torch.device) -> dict:
    """The pointer GEMM's tiles for a launch whose config cannot serve it (a GEMV config above 16 tokens or on a
    strided weight, a TMA config on a weight TMA cannot describe)."""
    if m >= WIDE_MIN_M:
        return _config_wide(m, n, k, num_sms(device))
    return _config_table(max(m, 3))


WIDE_MIN_M = 65  # from here `_config_wide` picks the tiles by the layer's shape; 17..64 `_config_mid`


def _config_mid(m: int, n: int, sms: int) -> dict:
    """17..64 tokens (session 14; bench/results/h100/kernels_s14/README.md, call 3: 13 variants of session 3's
    64 x 64 tiles at 32 and 64 tokens on the 8 Llama-3 shapes). Two things won nearly everywhere: no split-K past one
    program per SM ("fit"), and the quantizer and GEMM launched under PDL as at 3..16 tokens ("qwait", 2048 bytes
    of each weight row prefetched). Which tiles:
    - up to 32 tokens, where 16-token tiles make at most two programs per SM: `_config_s8`'s 16 x 64 tiles with the
      token tiles of a weight tile side by side (8B k/v at M = 32: 13.97 -> 7.65 us, 8B down 40.33 -> 28.73 us);
    - otherwise 64-token tiles on 8 warps (8B gate/up at M = 32 33.24 -> 25.10 us; 8B down at M = 64 41.23 -> 34.31).
    Median speedup over fp16 on the 8 shapes, served -> this rule (same call): M = 32 1.19x -> 1.62x, M = 64 1.20x ->
    1.44x; no shape more than 0.1% slower."""
    if m <= 32 and triton.cdiv(m, 16) * triton.cdiv(n, 64) <= 2 * sms:
        return {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "fit": 1, "pdl": 2048,
                "qwait": True, "qrecip": True, "m_fast": True}
    return {"BM": 64, "BN": 64, "BK": 256, "num_warps": 8, "num_stages": 3, "fit": 1, "pdl": 2048, "qwait": True}


def _config_wide(m: int, n: int, k: int, sms: int) -> dict:
    """65+ tokens (session 14; bench/results/h100/kernels_s14/README.md, calls 1-2, H100, 8 Llama-3 shapes at 256 and
    1024 tokens, 39 tile variants). What the sweep found against session 5's 64 x 128 tiles on 4 warps with K split
    to two programs per SM:
    - 8 warps, not 4: the 64 x 128 int32 accumulator took 166 registers a thread on 4 warps, 80 on 8 (ptxas, sm_90a);
    - no split-K where the tiles already fill the GPU: the split's fp32 partials (M x N x 4 bytes per split) cost more
      than the idle SMs (8B q/o at M = 256: 26.3 -> 16.0 us);
    - where 128 x 256 tiles (128 tokens x 256 weight rows, 4 stages, 192 KB of shared memory) fill >= 3/4 of the SMs,
      they do: each weight byte is read by half as many token tiles and each token by half as many weight tiles, which
      at these sizes is what the L2 can feed (8B gate/up at M = 256: 42.1 -> 36.6 us; 70B gate/up 161.0 -> 135.9 us);
    - otherwise the 64 x 128 tiles, one program per SM, or two with K split in two where K > 8192 (8B down: 52.5 ->
      47.4 us).
    M = 256 median speedup over fp16 (call 2): 1.02x -> 1.35x; M = 1024 every shape faster (e.g. 70B gate/up 563 ->
    458 us)."""
    wide = {"BM": 128, "BN": 256, "BK": 128, "num_warps": 8, "num_stages": 4, "m_fast": True, "split": 1, "qrecip": True}
    if triton.cdiv(m, wide["BM"]) * triton.cdiv(n, wide["BN"]) * 4 >= 3 * sms:
        return wide
    return {"BM": 64, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 4, "m_fast": True, "fit": 1 if k <= 8192 else 2,
            "qrecip": True}


def _config_s8(m: int) -> dict:
    """M = 3..16: session 5's GEMM tiles with session 8's grid (bench/results/h100/kernels_s8_w8a8/, call 2, one
    process, median speedup over fp16 on the 8 Llama-3 shapes): K split so the grid stays within one program per SM
    ("fit"; session 5 rounded up to 1.5-1.9 per SM) -- M = 4: 1.623x -> 1.657x; and at M > 4 six stages where that grid
    holds at most one program per SM ("deep") -- M = 8: 1.610x -> 1.659x, M = 16: 1.614x -> 1.643x (70B q/o_proj
    1.64x -> 1.78x). The M = 8/16 figures combine two configs of that run per shape: "fit s6" where 64-row weight
    tiles are at most the SMs, session 5's config where they are more (both launch then exactly as timed).
    Session 9 ("qrecip": the quantizer's codes through the fp64 reciprocal of the scale, bit-identical, one division
    per row instead of one per element): median speedup over the 8 shapes in one process (H100,
    `STAGES="sweep tests" bash bench/results/h100/kernels_s8_w8a8/device_run.sh`, bench/results/h100/e2e/session9/w8a8_qrecip/)
    M = 4 1.647x -> 1.708x, M = 8 1.646x -> 1.717x, M = 16 1.638x -> 1.714x.
    Session 13 ("qwait": the quantizer launched with PDL, waiting for the kernel before it; H100, one process,
    bench/results/h100/kernels_s13/README.md, call 3): faster on all 24 rows (0.1-9%), M = 4 1.712x -> 1.745x, M = 8
    1.739x -> 1.769x, M = 16 1.711x -> 1.745x; synthetic Llama-3-8B W8A8 decode at batch 8 (calls 4-5, arms in turn):
    TPOT 4.12-4.17 -> 3.86-4.00 ms. "pdl_wide": where the grid is more than one program per SM (8B gate/up: 224
    programs of 64 rows), each program sends 512 bytes of each weight row to L2 before its wait instead of 2048
    (call 8: 8B gate/up at M = 4 / 8 / 16 23.4 / 23.9 / 24.3 -> 22.3 / 22.7 / 23.2 us; on the one-wave grids of 8B
    down and 70B q/o 512 bytes was slower or even, so they keep 2048)."""
    cfg = {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "fit": 1, "pdl": 2048,
           "qrecip": True, "qwait": True, "pdl_wide": 512}
    return cfg if m <= 4 else dict(cfg, deep=6)


def _config_pointer_gemm(m: int) -> dict:
    """Session 5's table (the GEMV and the pointer-load GEMM `_w8a8_kernel`), see `_config`."""
    if m <= 2:
        return {"kind": "gemv", "num_warps": 4, "pdl": 1}
    if m <= 16:
        return {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "waves": 1, "pdl": 2048}
    if m <= 64:
        return {"BM": 64, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 3}
    return {"BM": 64, "BN": 128, "BK": 128, "num_warps": 4, "num_stages": 4, "m_fast": True}


def _config_table(m: int) -> dict:
    """The served config at M <= 2 and 17..64 (and above 64 tokens where `_config` is not given the layer's shape):
    session 5's table (`_config_pointer_gemm`, the sweeps' "old" baseline) with the exact-reciprocal quantizer above
    64 tokens (session 9, see `_config_s8`): M = 256 median 1.006x ->
    1.027x over fp16 (M = 1024 shares it, untimed); and up to 2 tokens (the few-token GEMV) the quantizer launched with
    PDL ("qwait", session 13, bench/results/h100/kernels_s13/README.md, call 4): M = 2 faster on all 8 shapes (0.5-9%),
    median 1.786x -> 1.946x. At M = 256 the GEMM under PDL behind the quantizer was slower on every shape (median
    1.000x -> 0.816x, with "qwait" 0.819x), so it launches plainly there."""
    cfg = _config_pointer_gemm(m)
    if m <= 2:
        return dict(cfg, qwait=True)
    return dict(cfg, qrecip=True) if m > 64 else cfg


GEMV_TOKENS_MAX_M = 16  # the few-token GEMV keeps a (BN, M, BW) accumulator: above 16 tokens the GEMM serves


def _gemv_rows(n: int, device: torch.device, cap: int = 16) -> int:
    """Output rows per program of the few-token GEMV: the most (up to cap) that still gives >= 2 programs per SM
    (it has no split-K: a 1024-row layer at 16 rows would run 64 programs on 132 SMs)."""
    bn = cap
    while bn > 2 and triton.cdiv(n, bn) < 2 * num_sms(device):
        bn //= 2
    return bn


def _quantize(x2: torch.Tensor, cfg: dict, pdl: bool, chain: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize_per_token` in front of the GEMV / GEMM of config `cfg`, launched as it asks. pdl: the kernel behind
    is launched with PDL (the quantizer lets it start early). "qwait" (session 13): the quantizer itself is launched
    with PDL and waits for the kernel before it, without that kernel letting it start early ("chain" does both); its
    launch then overlaps that kernel's last programs. "qrecip", "qwarps", "qchunk": quantize_per_token's recip, warps,
    chunk."""
    qwait = chain > 0 or (bool(cfg.get("qwait")) and pdl)
    return quantize_per_token(x2, early=pdl, chain=qwait, recip=bool(cfg.get("qrecip")), warps=cfg.get("qwarps"),
                              chunk=cfg.get("qchunk", 0))


def _launch_gemv(x2, weight, sw, out, cfg: dict) -> torch.Tensor:
    """`_gemv_tokens_kernel` on x quantized once (`quantize_per_token`, letting the GEMV start early under PDL), or
    with "xf" on the fp16/bf16 x itself (one launch: every program quantizes the tokens it needs)."""
    m, k = x2.shape
    n = weight.shape[0]
    pdl = bool(cfg.get("pdl", 0)) and pdl_enabled(x2.device)
    chain = config_chain(cfg) if pdl else 0
    xf = bool(cfg.get("xf"))
    if xf:
        xin, sx, stride = x2, sw, x2.stride(0)  # sx_ptr unused
    else:
        xq, sx = _quantize(x2, cfg, pdl, chain)
        xin, stride = xq.view(torch.int32), xq.stride(0) // 4
    kw = k // 4
    mt = triton.next_power_of_2(m)
    warps = cfg.get("num_warps", 4)
    bn = cfg.get("BN") or _gemv_rows(n, x2.device)
    if xf and not cfg.get("BN"):
        # Every program reads the M rows twice from L2 (absmax, then codes: 4 M K bytes): with at least 4 M weight rows
        # per program (4 M K bytes from DRAM) those reads stay below the weight stream.
        bn = max(bn, 4 * mt)
    # Words per step: `acc` accumulator elements per thread (BN x MT x BW / threads; default 32: 56-80 registers
    # at 4 warps in the sm_90 build, where MT = 8 with 128 words spilled nothing but took 227 and MT = 16 spilled).
    bw = cfg.get("BW") or max(16, cfg.get("acc", 32) * 32 * warps // (bn * mt))
    _gemv_tokens_kernel[(triton.cdiv(n, bn),)](
        xin, sx, weight.view(torch.int32), sw, out, m, n, stride, out.stride(0), kw,
        MT=mt, BN=bn, BW=min(triton.next_power_of_2(bw), triton.next_power_of_2(kw)), USE_ASM=not interpreting(),
        PDL=pdl, CHAIN=chain, X_FLOAT=xf, EPS=ACT_EPS, num_warps=warps, **({"launch_pdl": True} if pdl else {}))
    return out


def _launch(x, weight, w_scale, config: dict | None = None) -> torch.Tensor:
    n, k = _check(x, weight, w_scale)
    lead = x.shape[:-1]
    x2 = check_activation("w8a8_linear", x, k)
    m = x2.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0:
        return out.reshape(*lead, n)
    cfg = dict(config or _config(m, n, k, num_sms(x.device)))
    sw = w_scale.reshape(n)
    if cfg.get("kind") == "gemv" and m <= GEMV_TOKENS_MAX_M and weight.is_contiguous():
        return _launch_gemv(x2, weight, sw, out, cfg).reshape(*lead, n)
    if cfg.get("kind") == "tma":
        if w8a8_gemm_tma.supports(weight, n, k):
            pdl = bool(cfg.get("pdl")) and pdl_enabled(x.device)
            xq, sx = _quantize(x2, cfg, pdl, 0)
            return w8a8_gemm_tma.launch(xq, sx, weight, sw, out, cfg, pdl=pdl).reshape(*lead, n)
        cfg = _gemm_fallback(m, n, k, x.device)  # a weight TMA cannot take (strided, unaligned, pre-Hopper)
    if "BK" not in cfg:  # a gemv config above GEMV_TOKENS_MAX_M tokens or on a strided weight
        cfg = _gemm_fallback(m, n, k, x.device)
    fused = cfg.get("fused", m <= FUSED_QUANT_MAX_M)
    pdl = cfg.get("pdl", 0) if pdl_enabled(x.device) else 0  # Hopper on (griddepcontrol), not the interpreter
    chain = config_chain(cfg) if pdl else 0
    if fused:
        xin, sx = x2, sw  # sx_ptr unused when quantizing in-kernel
    else:
        xin, sx = _quantize(x2, cfg, pdl > 0, chain)
    return _gemm(xin, sx, weight, sw, out, cfg, fused=fused, pdl=pdl, chain=chain).reshape(*lead, n)


def _stages(programs: int, cfg: dict, device: torch.device) -> int:
    """Pipeline depth: "num_stages", or "deep" where the grid holds at most one program per SM (the smem a second
    program would take then deepens the weight prefetch instead). Session 8, M = 8/16 (sweep_s8.py): 6 stages took
    70B q/o 29.2 -> 26.8 us on 128 programs, but 8B gate/up 24.7 -> 25.5 us on 224, where 120 KB of smem per
    program leaves one program per SM and a second wave."""
    if cfg.get("deep") and programs <= num_sms(device):
        return cfg["deep"]
    return cfg.get("num_stages", 3)


def _gemm(xin, sx, weight, sw, out, cfg: dict, fused: bool = False, pdl: int = 0, chain: int = 0) -> torch.Tensor:
    """`_w8a8_kernel` into out (M, N): on int8 xin (M, K) with scales sx (M,) (fused False; the sweeps call this
    directly to time the GEMM without the quantizer), or on the fp16/bf16 x (fused: each program quantizes).
    pdl > 0: launched with programmatic dependent launch, prefetching `pdl` bytes of each weight row first."""
    m, k = xin.shape
    n = weight.shape[0]
    k_steps = triton.cdiv(k, cfg["BK"])
    n_tiles, m_tiles = triton.cdiv(n, cfg["BN"]), triton.cdiv(m, cfg["BM"])
    split, per_steps = config_chunks(n_tiles * m_tiles, k_steps, cfg, xin.device)
    programs = n_tiles * m_tiles * split
    stages = _stages(programs, cfg, xin.device)
    if pdl and cfg.get("pdl_wide") and programs > num_sms(xin.device):
        pdl = cfg["pdl_wide"]  # a grid of more than one wave: a shorter prefetch (`_config_s8`)
    ws, locks = splitk_buffers(xin.device, n_tiles * m_tiles, split, cfg["BN"] * cfg["BM"])
    m_fast = bool(cfg.get("m_fast", False))
    _w8a8_kernel[(m_tiles, n_tiles, split) if m_fast else (n_tiles, m_tiles, split)](
        xin, sx, weight, sw, out, ws, locks, m, n, k, per_steps * cfg["BK"], split, xin.stride(0), weight.stride(0),
        out.stride(0), QUANT_IN_KERNEL=fused, EPS=ACT_EPS, BN=cfg["BN"], BM=cfg["BM"], BK=cfg["BK"],
        PRO_BK=max(cfg["BK"], min(triton.next_power_of_2(k), 16384 // cfg["BM"])),
        PDL_PREFETCH=pow2_floor(min(pdl, per_steps * cfg["BK"])) if pdl else 0, M_FAST=m_fast, CHAIN=chain,
        ROUND=cfg.get("round", 1), num_warps=cfg["num_warps"], num_stages=stages, **({"launch_pdl": True} if pdl else {}),
    )
    return out


def _w8a8_op_impl(x: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    return _launch(x, weight, w_scale)


_w8a8_op = torch.library.custom_op("compress::w8a8_linear", _w8a8_op_impl, mutates_args=())


@_w8a8_op.register_fake
def _(x, weight, w_scale):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@on_input_device
def w8a8_linear(x: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = dequant(int8 GEMM(quant(x), weight)) (+ bias). x (..., K) fp16/bf16; weight int8 (N, K);
    w_scale (N,) or (N, 1) float. Returns (..., N) in x's dtype."""
    op = _w8a8_op_impl if direct_call(x, weight, w_scale) else torch.ops.compress.w8a8_linear
    y = op(x, weight, w_scale)
    return y + bias if bias is not None else y


def w8a8_linear_ref(x: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch: the same quantization, exact integer products (in float64), fp32 scaling."""
    q, s = quantize_per_token_ref(x)
    acc = (q.double() @ weight.double().t()).float()  # exact: |sum| < 2^53
    y = acc * s[:, None] * w_scale.reshape(-1).float()[None, :]
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])


def quantize_weight_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 (round to nearest) for tests and benchmarks: (int8 (N, K), fp32 (N,))."""
    wf = weight.float()
    s = wf.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    return torch.round(wf / s[:, None]).clamp(-127, 127).to(torch.int8), s
