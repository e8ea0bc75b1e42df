"""2:4 sparse linear layers over compress.sparse24 weights (values + 2-bit positions).

Variants:
- fp16/bf16 values, activations in the same dtype (`sparse24_linear`);
- int8 values with per-channel scales and dynamic per-token int8 activations, the W8A8 math of
  kernels/w8a8.py (`sparse24_w8a8_linear`);
- int8 values with per-channel scales on activations as they are: weight-only int8 (W8A16) on 2:4
  (`sparse24_w8a16_linear`; session 17), y = (x @ W_int^T) * s_w with the products summed in fp32.
Kernels:
- `_sparse24_gemv_iw_kernel` / `_sparse24_gemv_fw_kernel` ("prmtw", decode, M <= GEMV_MAX_M; session 16): read only
  the kept values and the 2-bit positions and gather the matching activations with PRMT, a meta word (int8: 4 value
  words) or a quad of 4 groups (fp16/bf16) per asm, every operand loaded in the tile's own layout (no shared memory);
  int8 runs on activations quantized once by kernels.w8a8.quantize_per_token and multiplies with dp4a, fp16/bf16 in
  fp32. Session 15's value-word GEMVs `_sparse24_gemv_f_kernel` / `_sparse24_gemv_i_kernel` ("prmt") stay for the
  sweeps and as the new kernels' twins in the tests.
- `_sparse24_gemv_w16_kernel` ("prmtw" for W8A16, M = 1; session 17): the same layout on int8 values and fp16/bf16 x,
  a value word (two groups) per asm, each value to fp32 in one instruction, fp32 FMAs.
- `_sparse24_gemv_kernel` ("gemv"): session 2's select-based GEMV, kept for the sweeps and for int8 layers
  whose in_features is not a multiple of 8.
- `_sparse24_tc_kernel` ("tc", from 2 tokens; session 14): widens whole meta / value words to the dense tile in
  registers (`_expand_words`: two PRMTs a group on the GPU since session 15) and feeds the tensor cores (weights on
  the left); W8A16 converts the widened int8 tile to x's dtype first.
- `_sparse24_mma_kernel` ("mma", int8 layers whose in_features is not a multiple of 8): expands each (BN, BK/2) tile
  lane by lane through a (BN, BK/4, 4) select and reshape; 5-10x slower than "tc" where both were timed (session 14,
  call 9).

- `_densify_kernel`: the dense weight in one launch, for the runtime's "dequantize, then the dense GEMM" paths.

Public: `sparse24_linear`, `sparse24_w8a8_linear`, `sparse24_w8a16_linear` (custom ops compress::sparse24_linear,
compress::sparse24_w8a8_linear, compress::sparse24_w8a16_linear) and their `*_ref` twins; `densify_sparse24` (reference: unpack_sparse24);
`alternative_configs` / `sparse24_linear_tiled` (other tilings for the runtime's path table).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from compress.errors import CompressError
from compress.packing.sparse24 import meta_words, unpack_sparse24
from triton.language.extra.cuda import gdc_wait

from kernels._common import (check_activation, check_device, config_chunks, interpreter_dot_f32, interpreting, pdl_enabled,
                             splitk_buffers, splitk_epilogue, swap_ab_pids, swap_ab_store, tuned_config)
from kernels.w8a8 import (ACT_EPS, _int8_codes, _quantize, _quantize_tile, _row_scales, quantize_per_token,
                          quantize_per_token_ref)
from kernels.op_dispatch import direct_call, on_input_device

GEMV_MAX_M = 1  # the PRMT GEMV re-reads the weights per token: from 2 tokens the tensor-core kernel wins (session 15)
# `_sparse24_tc_kernel`'s configs from 2 tokens. Session 14's H100 sweep (bench/results/h100/kernels_s14/, calls 9-10:
# 6 tile configs on the 8 Llama-3 shapes at 2..64 tokens) chose 64 weight rows x 256 columns (8 meta words) a step on
# 4 warps, K split to two programs per SM ("fit": 2) from 5 tokens, and for fp16 at 33..64 tokens 128-row tiles on 8
# warps; it served 2:4 fp16 layers at 0.94-1.04x of dense fp16 there. Session 15 (bench/results/h100/kernels_s15/,
# call 2) widened each group with two PRMTs (`_expand_words`, USE_ASM) and re-swept. Median over dense fp16 of the 2:4
# fp16 layers, session 14's widening -> PRMT: M = 2 0.96x -> 1.27x, 8 1.01x -> 1.32x, 16 1.02x -> 1.38x, 32 0.95x ->
# 1.39x, 64 0.81x -> 1.02x (an outlier: call 4 re-timed 64 tokens at ~0.84x). With 4 stages and "fit" 2 up to 16
# tokens: 1.42x / 1.41x / 1.38x at 2 / 8 / 16 (at 32, 4 stages lost: 1.04x). int8 over fp16: M = 2 1.34x (the fused
# PRMT GEMV) -> 1.82x (tc, 4 stages), 8..64 0.90-0.98x -> 1.53-1.85x. Above 64 tokens (call 2, M = 256): 128 x 128
# tiles, 128 columns a step on 8 warps beat densify + the dense GEMM on the 6 largest shapes (fp16 8B down 128.8 ->
# 86.3 us, 70B down 456.3 -> 333.8); at 1024 tokens densify + the dense GEMM stays faster, and the runtime's path table
# picks per layer.
TC_MAX_M = 64
TC_CONFIG = {"kind": "tc", "BN": 64, "BW": 8, "num_warps": 4, "num_stages": 3, "fit": 2}
TC_DEEP_MAX_M = 16  # up to here 4 stages
TC_WIDE_CONFIG = {"kind": "tc", "BM": 128, "BN": 128, "BW": 4, "num_warps": 8, "num_stages": 3, "fit": 1}


@triton.jit
def _sparse24_gemv_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16, or int8 activations quantized once by quantize_per_token when INT8
    sx_ptr,  # (M,) fp32 token scales (INT8 only)
    v_ptr,  # (N, K/2) kept values (fp16/bf16/int8)
    meta_ptr,  # (N, MW) int32, MW = ceil(K/32)
    sw_ptr,  # (N,) channel scales (INT8 only)
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    MW,
    WORDS_PER_SPLIT,  # multiple of BW
    S,
    # strides
    stride_xm,
    stride_om,
    # meta
    INT8: tl.constexpr,
    EPS: tl.constexpr,
    BN: tl.constexpr,
    BW: tl.constexpr,  # meta words (32 columns of K each) per iteration
    XB: tl.constexpr,  # load activations through a (BN, BW, 16) pointer tile (lands in the values' layout)
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_j = tl.arange(0, 16)  # value slot inside a meta word
    half_k = K // 2
    x_row = x_ptr + m * stride_xm

    if INT8:  # x was quantized once per token before this kernel: no division in the loop
        sx = tl.load(sx_ptr + m)

    acc = tl.zeros([BN, BW, 16], dtype=tl.float32)
    w_start = pid_s * WORDS_PER_SPLIT
    for ww in range(0, WORDS_PER_SPLIT, BW):
        offs_w = w_start + ww + tl.arange(0, BW)  # (BW,)
        slot = offs_w[:, None] * 16 + offs_j[None, :]  # (BW, 16) value index within a row
        s_mask = slot < half_k
        meta = tl.load(meta_ptr + offs_n[:, None] * MW + offs_w[None, :], mask=n_mask[:, None] & (offs_w < MW)[None, :], other=0)
        vals = tl.load(v_ptr + offs_n[:, None, None] * half_k + slot[None, :, :], mask=n_mask[:, None, None] & s_mask[None, :, :],
                       other=0).to(tl.float32)  # (BN, BW, 16)
        pos = (meta[:, :, None] >> (2 * offs_j)[None, None, :]) & 3  # (BN, BW, 16)
        if XB:
            kb = (slot // 2)[None, :, :] * 4 + 0 * offs_n[:, None, None]  # (BN, BW, 16)
            xm = s_mask[None, :, :] & n_mask[:, None, None]
        else:
            kb = (slot // 2) * 4  # first column of the slot's group
            xm = s_mask
        x0 = tl.load(x_row + kb, mask=xm, other=0).to(tl.float32)
        x1 = tl.load(x_row + kb + 1, mask=xm, other=0).to(tl.float32)
        x2 = tl.load(x_row + kb + 2, mask=xm, other=0).to(tl.float32)
        x3 = tl.load(x_row + kb + 3, mask=xm, other=0).to(tl.float32)
        if XB:
            lo = tl.where(pos == 0, x0, x1)
            hi = tl.where(pos == 2, x2, x3)
        else:
            lo = tl.where(pos == 0, x0[None, :, :], x1[None, :, :])
            hi = tl.where(pos == 2, x2[None, :, :], x3[None, :, :])
        acc += vals * tl.where(pos < 2, lo, hi)

    out = tl.sum(tl.sum(acc, axis=2), axis=1)  # (BN,)
    if INT8:
        out = out * tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32) * sx
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


# ---------------------------------------------------------------------------------------------------------
# Decode GEMVs that pick the activations with PRMT (one byte-permute instead of 3 compares and 3 selects
# per kept value, and no layout conversion: every operand is loaded in the tile's own layout).
# Float values: one int32 word holds the two kept values of a group of 4; the x candidates of the group
# are two words (x0 x1 | x2 x3); the 2-bit positions p0, p1 build the PRMT selector 0x1010 + 0x22 p0 +
# 0x2200 p1 that moves x[p0] and x[p1] into one word; then fp32 multiply-adds.
# int8 values: one word holds two groups (4 kept values); x was quantized once per token (int8), so the
# 4 candidates of a group are one word; the meta byte of the two groups, with its 2-bit fields spread to
# the 4 selector nibbles (+4 for the second group), gathers the 4 activations, and one dp4a multiplies
# and accumulates them in int32.
_F_ASM = tl.constexpr(tuple(
    "{ .reg .b32 t, a, b, sel, xs; .reg .b16 h0, h1, y0, y1; .reg .f32 f0, f1, g0, g1; "
    "shr.u32 t, $2, $3; and.b32 a, t, 3; and.b32 b, t, 12; shl.b32 b, b, 6; or.b32 a, a, b; "
    "mad.lo.u32 sel, a, 0x22, 0x1010; prmt.b32 xs, $4, $5, sel; mov.b32 {h0, h1}, $1; mov.b32 {y0, y1}, xs; "
    f"cvt.f32.{t} f0, h0; cvt.f32.{t} f1, h1; cvt.f32.{t} g0, y0; cvt.f32.{t} g1, y1; "
    "mul.f32 f0, f0, g0; fma.rn.f32 $0, f1, g1, f0; }" for t in ("f16", "bf16")))
_I_ASM = tl.constexpr(
    "{ .reg .b32 b, t, u, sel, xs; shr.u32 b, $2, $3; and.b32 b, b, 0xFF; "
    "shl.b32 t, b, 4; or.b32 t, t, b; and.b32 t, t, 0x0F0F; shl.b32 u, t, 2; or.b32 u, u, t; and.b32 u, u, 0x3333; "
    "or.b32 sel, u, 0x4400; prmt.b32 xs, $4, $5, sel; dp4a.s32.s32 $0, $1, xs, $6; }")


@triton.jit
def _half_to_f32(h, IS_BF16: tl.constexpr):
    """Low 16 bits of int32 h as fp16/bf16 -> fp32 (plain integer ops, for the CPU interpreter)."""
    if IS_BF16:
        return (h << 16).to(tl.float32, bitcast=True)
    return h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _sparse24_gemv_f_kernel(
    x_ptr,  # (M, K/2) int32 view of fp16/bf16 x
    v_ptr,  # (N, K/4) int32 view of the kept values
    meta_ptr,  # (N, MW) int32
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    M,
    N,
    G,  # groups of 4 per row = K / 4
    MW,
    WORDS_PER_SPLIT,  # meta words per split, multiple of BW
    S,
    stride_xm,  # in int32 words
    stride_om,
    IS_BF16: tl.constexpr,
    USE_ASM: tl.constexpr,
    BN: tl.constexpr,
    BW: tl.constexpr,  # meta words (8 groups each) per iteration
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_w = tl.arange(0, BW)
    offs_c = tl.arange(0, 8)
    sh = (4 * offs_c)[None, None, :] + tl.zeros([BN, BW, 8], dtype=tl.int32)  # bit offset of the group's positions
    x_row = x_ptr + m * stride_xm

    acc = tl.zeros([BN, BW, 8], dtype=tl.float32)
    w_start = pid_s * WORDS_PER_SPLIT
    g = w_start * 8 + offs_w[:, None] * 8 + offs_c[None, :]  # (BW, 8) group index of the first iteration
    # Loop-carried pointers (one add per iteration instead of a 64-bit address per element).
    v_ptrs = v_ptr + offs_n[:, None, None] * G + g[None, :, :]
    m_ptrs = meta_ptr + offs_n[:, None] * MW + (w_start + offs_w)[None, :]
    x_ptrs = x_row + 2 * g[:, :, None] + tl.arange(0, 2)[None, None, :]  # (BW, 8, 2): 16 contiguous words per row
    # Software prefetch: the next iteration's tiles are in flight while this one computes (Triton does
    # not pipeline loads that feed no tensor-core product).
    g_ok = g < G
    v = tl.load(v_ptrs, mask=n_mask[:, None, None] & g_ok[None, :, :], other=0)
    meta = tl.load(m_ptrs, mask=n_mask[:, None] & ((w_start + offs_w) < MW)[None, :], other=0)
    xw = tl.load(x_ptrs, mask=g_ok[:, :, None], other=0)
    for ww in range(0, WORDS_PER_SPLIT, BW):
        v_ptrs += BW * 8
        m_ptrs += BW
        x_ptrs += BW * 16
        g_ok = (g + (ww + BW) * 8 < G) & (ww + BW < WORDS_PER_SPLIT)
        v_nxt = tl.load(v_ptrs, mask=n_mask[:, None, None] & g_ok[None, :, :], other=0)
        meta_nxt = tl.load(m_ptrs, mask=n_mask[:, None] & ((w_start + ww + BW + offs_w) < MW)[None, :]
                           & (ww + BW < WORDS_PER_SPLIT), other=0)
        xw_nxt = tl.load(x_ptrs, mask=g_ok[:, :, None], other=0)

        mb = tl.broadcast_to(meta[:, :, None], [BN, BW, 8])
        x01, x23 = tl.split(xw)
        x01 = tl.broadcast_to(x01[None, :, :], [BN, BW, 8])
        x23 = tl.broadcast_to(x23[None, :, :], [BN, BW, 8])
        if USE_ASM:
            acc += tl.inline_asm_elementwise(_F_ASM[IS_BF16], "=f,r,r,r,r,r", [v, mb, sh, x01, x23], dtype=tl.float32,
                                             is_pure=True, pack=1)
        else:
            t = mb >> sh
            p0 = t & 3
            p1 = (t >> 2) & 3
            xs0 = tl.where(p0 < 2, x01 >> (16 * p0), x23 >> (16 * (p0 - 2))) & 0xFFFF
            xs1 = tl.where(p1 < 2, x01 >> (16 * p1), x23 >> (16 * (p1 - 2))) & 0xFFFF
            acc += (_half_to_f32(v & 0xFFFF, IS_BF16) * _half_to_f32(xs0, IS_BF16)
                    + _half_to_f32((v >> 16) & 0xFFFF, IS_BF16) * _half_to_f32(xs1, IS_BF16))
        v, meta, xw = v_nxt, meta_nxt, xw_nxt

    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


@triton.jit
def _sbyte(w, i):
    """Byte i (0..3, tensor) of int32 w as a signed integer (plain ops, for the CPU interpreter)."""
    b = (w >> (8 * i)) & 0xFF
    return (b ^ 0x80) - 0x80


@triton.jit
def _sparse24_gemv_i_kernel(
    x_ptr,  # (M, K/4) int32 view of the int8 activations (quantize_per_token)
    sx_ptr,  # (M,) fp32 token scales
    v_ptr,  # (N, K/8) int32 view of the int8 kept values (two groups per word)
    meta_ptr,  # (N, MW) int32
    sw_ptr,  # (N,) channel scales
    out_ptr,  # (M, N)
    ws_ptr,
    lock_ptr,
    M,
    N,
    VW,  # value words per row = K / 8
    MW,
    WORDS_PER_SPLIT,  # meta words per split, multiple of BW
    S,
    stride_xm,  # in int32 words
    stride_om,
    USE_ASM: tl.constexpr,
    BN: tl.constexpr,
    BW: tl.constexpr,
    PDL_PREFETCH: tl.constexpr = 0,  # > 0: launched with programmatic dependent launch (see below)
    X_FLOAT: tl.constexpr = False,  # x_ptr holds the fp16/bf16 activations (stride_xm in elements): each program
                                    # quantizes them itself (no quantizer launch before this kernel)
    K: tl.constexpr = 0,  # in_features (X_FLOAT only)
    PRO_BK: tl.constexpr = 1024,  # columns per step of the absmax prologue (X_FLOAT only)
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_w = tl.arange(0, BW)
    offs_c = tl.arange(0, 4)
    sh = (8 * offs_c)[None, None, :] + tl.zeros([BN, BW, 4], dtype=tl.int32)  # the meta byte of the word's 2 groups
    x_row = x_ptr + m.to(tl.int64) * stride_xm

    acc = tl.zeros([BN, BW, 4], dtype=tl.int32)
    w_start = pid_s * WORDS_PER_SPLIT
    i = w_start * 4 + offs_w[:, None] * 4 + offs_c[None, :]  # (BW, 4) value word of the first iteration
    v_ptrs = v_ptr + offs_n[:, None, None] * VW + i[None, :, :]
    m_ptrs = meta_ptr + offs_n[:, None] * MW + (w_start + offs_w)[None, :]
    if X_FLOAT:
        # (BW, 4, 2, 4) activations: value word i covers columns 8i..8i+7 = the bytes of x words 2i and 2i + 1.
        byte = tl.arange(0, 4)
        x_ptrs = x_row + 8 * i[:, :, None, None] + 4 * tl.arange(0, 2)[None, None, :, None] + byte[None, None, None, :]
        # The token's scale needs its whole row (read from L2 by every program): the weights' first tiles are
        # requested below before this loop's result is needed, so their DRAM latency overlaps it.
        offs_k = tl.arange(0, PRO_BK)
        amax = tl.zeros([PRO_BK], tl.float32)
        for k0 in range(0, K, PRO_BK):
            xk = tl.load(x_row + k0 + offs_k, mask=(k0 + offs_k) < K, other=0.0)
            amax = tl.maximum(amax, tl.abs(xk.to(tl.float32)))
        sx_f = tl.math.div_rn(tl.maximum(tl.max(amax, axis=0), 1e-8), 127.0)
        inv_sx = 1.0 / sx_f.to(tl.float64)
    else:
        x_ptrs = x_row + 2 * i[:, :, None] + tl.arange(0, 2)[None, None, :]  # (BW, 4, 2): 8 contiguous words per row
    if PDL_PREFETCH > 0:
        # Launched with programmatic dependent launch behind the activation quantizer: stream the first
        # values into L2 while it runs, then wait for it before the first read of x.
        lines = tl.minimum(w_start * 4 + tl.arange(0, PDL_PREFETCH // 128) * 32, VW - 1)  # 128-byte lines, in words
        pf = v_ptr + tl.minimum(offs_n, N - 1)[:, None] * VW + lines[None, :]
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pf], dtype=tl.int32, is_pure=False,
                                  pack=1)
        gdc_wait()
    i_ok = i < VW
    v = tl.load(v_ptrs, mask=n_mask[:, None, None] & i_ok[None, :, :], other=0)
    meta = tl.load(m_ptrs, mask=n_mask[:, None] & ((w_start + offs_w) < MW)[None, :], other=0)
    if X_FLOAT:
        xw = tl.load(x_ptrs, mask=i_ok[:, :, None, None], other=0.0)
    else:
        xw = tl.load(x_ptrs, mask=i_ok[:, :, None], other=0)
    for ww in range(0, WORDS_PER_SPLIT, BW):
        v_ptrs += BW * 4
        m_ptrs += BW
        x_ptrs += BW * (32 if X_FLOAT else 8)
        i_ok = (i + (ww + BW) * 4 < VW) & (ww + BW < WORDS_PER_SPLIT)
        v_nxt = tl.load(v_ptrs, mask=n_mask[:, None, None] & i_ok[None, :, :], other=0)
        meta_nxt = tl.load(m_ptrs, mask=n_mask[:, None] & ((w_start + ww + BW + offs_w) < MW)[None, :]
                           & (ww + BW < WORDS_PER_SPLIT), other=0)
        if X_FLOAT:
            xw_nxt = tl.load(x_ptrs, mask=i_ok[:, :, None, None], other=0.0)
            # this step's activations -> int8 codes (the quantizer's exact rounding) -> 2 words per value word
            q = _int8_codes(xw.to(tl.float32), inv_sx).to(tl.int32)
            xq = tl.sum((q & 0xFF) << (8 * byte)[None, None, None, :], axis=3)  # disjoint bytes: sum = or
        else:
            xw_nxt = tl.load(x_ptrs, mask=i_ok[:, :, None], other=0)
            xq = xw

        mb = tl.broadcast_to(meta[:, :, None], [BN, BW, 4])
        xe, xo = tl.split(xq)
        xe = tl.broadcast_to(xe[None, :, :], [BN, BW, 4])
        xo = tl.broadcast_to(xo[None, :, :], [BN, BW, 4])
        if USE_ASM:
            acc = tl.inline_asm_elementwise(_I_ASM, "=r,r,r,r,r,r,r", [v, mb, sh, xe, xo, acc], dtype=tl.int32,
                                            is_pure=True, pack=1)
        else:
            b = (mb >> sh) & 0xFF
            acc += (_sbyte(v, 0) * _sbyte(xe, b & 3) + _sbyte(v, 1) * _sbyte(xe, (b >> 2) & 3)
                    + _sbyte(v, 2) * _sbyte(xo, (b >> 4) & 3) + _sbyte(v, 3) * _sbyte(xo, (b >> 6) & 3))
        v, meta, xw = v_nxt, meta_nxt, xw_nxt

    dot = tl.sum(tl.sum(acc, axis=2), axis=1)  # exact int32
    if X_FLOAT:
        sx = sx_f
    else:
        sx = tl.load(sx_ptr + m)
    out = dot.to(tl.float32) * tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32) * sx
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


# int8 values, a whole meta word per asm (session 16): one meta word holds the positions of 4 value words (8 groups,
# 32 columns). Its 4 bytes are spread to the 4 PRMT selectors at once: PRMT moves bytes 0 and 1 to the low byte of
# each 16-bit half, then two shift-and-mask rounds spread each byte's 2-bit fields to nibbles and 0x4400 picks the
# second group's word. The per-value-word asm above spreads one byte per value word (11 instructions per value word;
# this is ~5.5). The 8 activation words of the meta word are split out of one (BW, 8) tile, so each thread loads them
# once per meta word rather than twice per value word.
_IW_ASM = tl.constexpr(
    "{ .reg .b32 z, lo, hi, t, u, s0, s1, xs, a; mov.b32 z, 0; "
    "prmt.b32 lo, $1, z, 0x4140; prmt.b32 hi, $1, z, 0x4342; "
    "shl.b32 t, lo, 4; or.b32 t, t, lo; and.b32 t, t, 0x0F0F0F0F; shl.b32 u, t, 2; or.b32 u, u, t; "
    "and.b32 u, u, 0x33333333; or.b32 s0, u, 0x44004400; "
    "shl.b32 t, hi, 4; or.b32 t, t, hi; and.b32 t, t, 0x0F0F0F0F; shl.b32 u, t, 2; or.b32 u, u, t; "
    "and.b32 u, u, 0x33333333; or.b32 s1, u, 0x44004400; "
    "prmt.b32 xs, $6, $7, s0; dp4a.s32.s32 a, $2, xs, $14; shr.u32 s0, s0, 16; "
    "prmt.b32 xs, $8, $9, s0; dp4a.s32.s32 a, $3, xs, a; "
    "prmt.b32 xs, $10, $11, s1; dp4a.s32.s32 a, $4, xs, a; shr.u32 s1, s1, 16; "
    "prmt.b32 xs, $12, $13, s1; dp4a.s32.s32 $0, $5, xs, a; }")


@triton.jit
def _split4(t, R: tl.constexpr, C: tl.constexpr):
    """(R, C, 4) -> its 4 slices (R, C) along the last axis, in order (free: the axis is in one thread's registers)."""
    a, b = tl.split(tl.reshape(t, [R, C, 2, 2]))  # a: elements 0 and 2, b: 1 and 3
    t0, t2 = tl.split(a)
    t1, t3 = tl.split(b)
    return t0, t1, t2, t3


@triton.jit
def _iw_ref(meta, vc, xe, xo, c: tl.constexpr):
    """Value word c (0..3) of each meta word: `_IW_ASM`'s products with plain integer ops (the CPU interpreter)."""
    b = (meta >> (8 * c)) & 0xFF
    return (_sbyte(vc, 0) * _sbyte(xe, b & 3) + _sbyte(vc, 1) * _sbyte(xe, (b >> 2) & 3)
            + _sbyte(vc, 2) * _sbyte(xo, (b >> 4) & 3) + _sbyte(vc, 3) * _sbyte(xo, (b >> 6) & 3))


@triton.jit
def _gemv_tile(m_rows, v_rows, mi, vi, offs_c, ok, limit, EVEN: tl.constexpr, EVICT: tl.constexpr):
    """One step's weights for the one-token GEMVs below: meta words (B, BN) at indices mi (B,) and 4 value words
    (B, BN, 4) from vi (B,) on. EVEN: every tile is whole, and indices past the split are clamped by the caller (a
    prefetch past the end reads words it will not use), so no load is masked; else ok (B, BN) masks the tile and the
    value words from `limit` on (the row's end)."""
    if EVEN:
        meta = tl.load(m_rows + mi[:, None], eviction_policy=EVICT)
        v = tl.load(v_rows + vi[:, None, None], eviction_policy=EVICT)
    else:
        meta = tl.load(m_rows + mi[:, None], mask=ok, other=0, eviction_policy=EVICT)
        v = tl.load(v_rows + vi[:, None, None],
                    mask=ok[:, :, None] & (vi[:, None, None] + offs_c[None, None, :] < limit), other=0,
                    eviction_policy=EVICT)
    return meta, v


@triton.jit
def _gemv_x8(x_rows, xw, ok, offs_c, limit, EVEN: tl.constexpr):
    """A step's 8 activation words per meta word (int8) or quad (fp16/bf16) from word xw (B,) on, as two (B, BN, 4)
    tiles; unless EVEN, masked by ok (B, 1, 1) and by `limit` (the row's words)."""
    if EVEN:
        xa = tl.load(x_rows + xw[:, None, None])
        xb = tl.load(x_rows + (xw + 4)[:, None, None])
    else:
        xa = tl.load(x_rows + xw[:, None, None], mask=ok & ((xw[:, None, None] + offs_c) < limit), other=0)
        xb = tl.load(x_rows + (xw + 4)[:, None, None], mask=ok & ((xw[:, None, None] + 4 + offs_c) < limit), other=0)
    return xa, xb


@triton.jit
def _meta_word_rows(v_ptr, meta_ptr, x_ptr, m, stride_xm, offs_n, offs_c, N, VW, MW, ZERO):
    """Row pointers of the meta-word GEMVs' tiles (int8 values: 4 value words a meta word): value words (1, BN, 4),
    meta words (1, BN), activation words (1, BN, 4). Rows past N read row N - 1; the epilogue stores none of them."""
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    v_rows = v_ptr + rows[None, :, None] * VW + offs_c[None, None, :]
    m_rows = meta_ptr + rows[None, :] * MW
    # The activation words of a tile, loaded by every lane for its own elements (L1 hits after the first): ZERO keeps
    # the compiler from folding the rows into one (BW, 8) load, which would go through shared memory to the lanes.
    x_rows = x_ptr + m.to(tl.int64) * stride_xm + offs_n[None, :, None] * ZERO + offs_c[None, None, :]
    return v_rows, m_rows, x_rows


@triton.jit
def _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN: tl.constexpr, EVICT: tl.constexpr):
    """The tile of meta words mw (BW,) and their value words: indices clamped to the split (a prefetch past its end
    reads its last words again, unused) and masked past it unless EVEN. ONE: the meta words' stride, a run-time 1,
    hides their contiguity, so the meta load takes the value tile's lane order instead of a vectorized order of its
    own (and a layout change through shared memory after it)."""
    mi = tl.minimum(mw, w_end - 1) * ONE
    return _gemv_tile(m_rows, v_rows, mi, mi * 4, offs_c, (mw < w_end)[:, None], VW, EVEN, EVICT)


@triton.jit(do_not_specialize=["ONE"])
def _sparse24_gemv_iw_kernel(
    x_ptr,  # (M, K/4) int32 view of the int8 activations (quantize_per_token)
    sx_ptr,  # (M,) fp32 token scales
    v_ptr,  # (N, K/8) int32 view of the int8 kept values (two groups per word)
    meta_ptr,  # (N, MW) int32
    sw_ptr,  # (N,) channel scales
    out_ptr,  # (M, N)
    ws_ptr,
    lock_ptr,
    M,
    N,
    VW,  # value words per row = K / 8
    MW,
    WORDS_PER_SPLIT,  # meta words per split, a multiple of BW
    S,
    stride_xm,  # in int32 words
    stride_om,
    ZERO,  # 0, at run time (see the x loads)
    ONE,  # 1, at run time and not specialized (see the meta loads)
    USE_ASM: tl.constexpr,
    BN: tl.constexpr,
    BW: tl.constexpr,  # meta words per step
    PDL: tl.constexpr = False,  # launched with programmatic dependent launch behind the quantizer
    EVEN: tl.constexpr = False,  # K a multiple of 32 and MW of BW: every tile whole, no masked load
    EVICT: tl.constexpr = "",  # the weight loads' L2 eviction policy (config "evict": "" or "evict_first")
):
    """One-token 2:4 int8 GEMV, a meta word (4 value words, 32 columns) per asm: y = (sum q_x q_w) * s_w * s_x.
    Every tile is (BW meta words, BN rows, ...), meta words first: the loads' coalescing order then puts a warp's lanes
    along a row's meta words (16 contiguous value bytes a lane), and every operand of the asm -- the 4 value words, the
    meta word, the 8 activation words -- lands in the same (BW, BN) layout, so no tile goes through shared memory.
    The first two weight tiles are requested before the wait for the quantizer (PDL), each later one a tile ahead."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_w = tl.arange(0, BW)
    offs_c = tl.arange(0, 4)
    w_start = pid_s * WORDS_PER_SPLIT
    w_end = tl.minimum(w_start + WORDS_PER_SPLIT, MW)
    v_rows, m_rows, x_rows = _meta_word_rows(v_ptr, meta_ptr, x_ptr, m, stride_xm, offs_n, offs_c, N, VW, MW, ZERO)

    mw = w_start + offs_w
    meta, v = _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN, EVICT)
    mw += BW
    meta_nx, v_nx = _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN, EVICT)
    if PDL:
        gdc_wait()
    sx = tl.load(sx_ptr + m)
    acc = tl.zeros([BW, BN], dtype=tl.int32)
    for w0 in range(w_start, w_end, BW):
        xa, xb = _gemv_x8(x_rows, (w0 + offs_w) * 8, ((w0 + offs_w) < w_end)[:, None, None], offs_c, 2 * VW, EVEN)
        v0, v1, v2, v3 = _split4(v, BW, BN)
        x0, x1, x2, x3 = _split4(xa, BW, BN)
        x4, x5, x6, x7 = _split4(xb, BW, BN)
        if USE_ASM:
            acc = tl.inline_asm_elementwise(_IW_ASM, "=r" + ",r" * 14,
                                            [meta, v0, v1, v2, v3, x0, x1, x2, x3, x4, x5, x6, x7, acc],
                                            dtype=tl.int32, is_pure=True, pack=1)
        else:
            acc += (_iw_ref(meta, v0, x0, x1, 0) + _iw_ref(meta, v1, x2, x3, 1) + _iw_ref(meta, v2, x4, x5, 2)
                    + _iw_ref(meta, v3, x6, x7, 3))
        meta, v = meta_nx, v_nx
        mw += BW
        meta_nx, v_nx = _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN, EVICT)

    dot = tl.sum(acc, axis=0)  # exact int32
    out = dot.to(tl.float32) * tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32) * sx
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


# fp16/bf16 values in the meta-word layout (session 16), a quad of 4 groups per asm: the quad's 16 meta bits (half a
# meta word, $2 = 0 or 16) are spread to two PRMT selectors per byte at once -- a byte holds two groups' positions
# p0 p1 q0 q1; two shift-and-mask rounds put them at bits 0, 8, 16, 24, and one multiply-add by 0x22 (+ 0x10101010)
# makes each 16-bit half `_F_ASM`'s selector 0x1010 + 0x22 p0 + 0x2200 p1 -- then per group one PRMT gathers its two
# activations and two FMAs add the fp32 products to the accumulator.
_FW_GROUP = ("mov.b32 {{h0, h1}}, {v}; mov.b32 {{y0, y1}}, xs; cvt.f32.{t} f0, h0; cvt.f32.{t} f1, h1; "
             "cvt.f32.{t} g0, y0; cvt.f32.{t} g1, y1; fma.rn.f32 a, f0, g0, {acc}; fma.rn.f32 {out}, f1, g1, a; ")
_FW_SPREAD = ("and.b32 u, u, 0xFF; shl.b32 w, u, 12; or.b32 u, u, w; and.b32 u, u, 0x000F000F; shl.b32 w, u, 6; "
              "or.b32 u, u, w; and.b32 u, u, 0x03030303; mad.lo.u32 {s}, u, 0x22, 0x10101010; ")
_FW_ASM = tl.constexpr(tuple(
    "{ .reg .b32 t, u, w, s0, s1, xs; .reg .b16 h0, h1, y0, y1; .reg .f32 f0, f1, g0, g1, a; "
    "shr.u32 t, $1, $2; mov.b32 u, t; " + _FW_SPREAD.format(s="s0") + "shr.u32 u, t, 8; " + _FW_SPREAD.format(s="s1")
    + "prmt.b32 xs, $7, $8, s0; " + _FW_GROUP.format(v="$3", t=t, acc="$15", out="a")
    + "shr.u32 s0, s0, 16; prmt.b32 xs, $9, $10, s0; " + _FW_GROUP.format(v="$4", t=t, acc="a", out="a")
    + "prmt.b32 xs, $11, $12, s1; " + _FW_GROUP.format(v="$5", t=t, acc="a", out="a")
    + "shr.u32 s1, s1, 16; prmt.b32 xs, $13, $14, s1; " + _FW_GROUP.format(v="$6", t=t, acc="a", out="$0") + "}"
    for t in ("f16", "bf16")))


@triton.jit
def _fw_ref(mq, vc, x01, x23, c: tl.constexpr, IS_BF16: tl.constexpr):
    """Group c (0..3) of a quad: `_FW_ASM`'s two products with plain integer ops (the CPU interpreter); mq holds the
    quad's 16 meta bits in its low half."""
    t = mq >> (4 * c)
    p0 = t & 3
    p1 = (t >> 2) & 3
    xs0 = tl.where(p0 < 2, x01 >> (16 * p0), x23 >> (16 * (p0 - 2))) & 0xFFFF
    xs1 = tl.where(p1 < 2, x01 >> (16 * p1), x23 >> (16 * (p1 - 2))) & 0xFFFF
    return (_half_to_f32(vc & 0xFFFF, IS_BF16) * _half_to_f32(xs0, IS_BF16)
            + _half_to_f32((vc >> 16) & 0xFFFF, IS_BF16) * _half_to_f32(xs1, IS_BF16))


@triton.jit(do_not_specialize=["ONE"])
def _sparse24_gemv_fw_kernel(
    x_ptr,  # (M, K/2) int32 view of fp16/bf16 x
    v_ptr,  # (N, K/4) int32 view of the kept values (a group's two per word)
    meta_ptr,  # (N, MW) int32
    out_ptr,  # (M, N)
    ws_ptr,
    lock_ptr,
    M,
    N,
    G,  # groups of 4 columns per row = K / 4
    MW,
    QUADS_PER_SPLIT,  # quads (4 groups, 16 columns) per split, a multiple of BQ
    S,
    stride_xm,  # in int32 words
    stride_om,
    ZERO,  # 0, at run time (see `_sparse24_gemv_iw_kernel`)
    ONE,  # 1, at run time and not specialized
    IS_BF16: tl.constexpr,
    USE_ASM: tl.constexpr,
    BN: tl.constexpr,
    BQ: tl.constexpr,  # quads per step
    EVEN: tl.constexpr = False,  # K a multiple of 16 and its quads of BQ: no masked load
    EVICT: tl.constexpr = "",  # the weight loads' L2 eviction policy
):
    """One-token 2:4 GEMV on fp16/bf16 values in `_sparse24_gemv_iw_kernel`'s layout: tiles (BQ quads, BN rows, 4
    groups), lanes along a row's quads (16 contiguous value bytes a lane), every operand of the asm -- a quad's 4 value
    words, its meta word, its 8 activation words -- loaded in the tile's own layout; fp32 products and sums."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    offs_q = tl.arange(0, BQ)
    offs_c = tl.arange(0, 4)
    kq = (G + 3) // 4
    q_start = pid_s * QUADS_PER_SPLIT
    q_end = tl.minimum(q_start + QUADS_PER_SPLIT, kq)
    v_rows = v_ptr + rows[None, :, None] * G + offs_c[None, None, :]  # (1, BN, 4)
    m_rows = meta_ptr + rows[None, :] * MW  # (1, BN)
    x_rows = x_ptr + m.to(tl.int64) * stride_xm + offs_n[None, :, None] * ZERO + offs_c[None, None, :]  # (1, BN, 4)

    # a quad's positions are half of meta word q // 2 (loaded once per quad); its value words 4 q .. 4 q + 3
    q = q_start + offs_q
    meta, v = _gemv_tile(m_rows, v_rows, (q >> 1) * ONE, q * 4, offs_c, (q < q_end)[:, None], G, EVEN, EVICT)
    q += BQ
    qc = tl.minimum(q, q_end - 1)
    meta_nx, v_nx = _gemv_tile(m_rows, v_rows, (qc >> 1) * ONE, qc * 4, offs_c, (q < q_end)[:, None], G, EVEN, EVICT)
    acc = tl.zeros([BQ, BN], dtype=tl.float32)
    for q0 in range(q_start, q_end, BQ):
        qx = q0 + offs_q
        xa, xb = _gemv_x8(x_rows, qx * 8, (qx < q_end)[:, None, None], offs_c, 2 * G, EVEN)  # 2 words a group
        v0, v1, v2, v3 = _split4(v, BQ, BN)
        x0, x1, x2, x3 = _split4(xa, BQ, BN)
        x4, x5, x6, x7 = _split4(xb, BQ, BN)
        sh = tl.broadcast_to((16 * (qx & 1))[:, None], [BQ, BN])  # the quad's half of its meta word
        if USE_ASM:
            acc = tl.inline_asm_elementwise(_FW_ASM[IS_BF16], "=f" + ",r" * 14 + ",f",
                                            [meta, sh, v0, v1, v2, v3, x0, x1, x2, x3, x4, x5, x6, x7, acc],
                                            dtype=tl.float32, is_pure=True, pack=1)
        else:
            mq = meta >> sh
            acc += (_fw_ref(mq, v0, x0, x1, 0, IS_BF16) + _fw_ref(mq, v1, x2, x3, 1, IS_BF16)
                    + _fw_ref(mq, v2, x4, x5, 2, IS_BF16) + _fw_ref(mq, v3, x6, x7, 3, IS_BF16))
        meta, v = meta_nx, v_nx
        q += BQ
        qc = tl.minimum(q, q_end - 1)
        meta_nx, v_nx = _gemv_tile(m_rows, v_rows, (qc >> 1) * ONE, qc * 4, offs_c, (q < q_end)[:, None], G, EVEN,
                                   EVICT)

    out = tl.sum(acc, axis=0)
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


# Weight-only int8 values on fp16/bf16 activations (session 17), a value word (two groups, 4 int8 values) per asm, in
# `_sparse24_gemv_iw_kernel`'s layout: the value word's meta byte is spread to the two groups' PRMT selectors as in
# `_FW_ASM` (0x22 per position, 0x10101010); each group's PRMT gathers its two activations (16-bit halves); each int8
# value becomes an fp32 in one instruction (a sign-extended byte field to float: I2F.S8 with a byte select in the
# sm_90 SASS), and two fp32 FMAs per group add the products to the accumulator. The row scale is applied once, after
# the sum. (A first form made each value's fp32 through its byte biased under 2^23, PRMT then a subtraction: 33.5 SASS
# instructions a value word against 28.5 for this one.)
_W16_SPREAD = ("bfe.u32 u, $1, {b}, 8; shl.b32 w, u, 12; or.b32 u, u, w; and.b32 u, u, 0x000F000F; shl.b32 w, u, 6; "
               "or.b32 u, u, w; and.b32 u, u, 0x03030303; mad.lo.u32 s, u, 0x22, 0x10101010; ")
_W16_VALUES = "".join(f"bfe.s32 t, $2, {8 * i}, 8; cvt.rn.f32.s32 e{i}, t; " for i in range(4))
_W16_GROUP = ("prmt.b32 xs, {xa}, {xb}, s; mov.b32 {{h0, h1}}, xs; cvt.f32.{t} g0, h0; cvt.f32.{t} g1, h1; "
              "fma.rn.f32 a, {e0}, g0, {acc}; fma.rn.f32 {out}, {e1}, g1, a; ")
_W16_ASM = tl.constexpr(tuple(  # [4 * IS_BF16 + j]: value word j of the meta word
    "{ .reg .b32 t, u, w, s, xs; .reg .b16 h0, h1; .reg .f32 g0, g1, a, e0, e1, e2, e3; "
    + _W16_SPREAD.format(b=8 * j) + _W16_VALUES
    + _W16_GROUP.format(xa="$3", xb="$4", t=t, e0="e0", e1="e1", acc="$7", out="a")
    + "shr.u32 s, s, 16; " + _W16_GROUP.format(xa="$5", xb="$6", t=t, e0="e2", e1="e3", acc="a", out="$0") + "}"
    for t in ("f16", "bf16") for j in range(4)))


@triton.jit
def _w16_ref(meta, vc, x0, x1, x2, x3, j: tl.constexpr, IS_BF16: tl.constexpr):
    """Value word j (0..3) of each meta word: `_W16_ASM`'s four products with plain integer ops (the CPU interpreter);
    x0, x1 hold group 2j's four activations, x2, x3 group 2j + 1's."""
    b = meta >> (8 * j)
    out = tl.zeros(meta.shape, tl.float32)
    for g in tl.static_range(2):
        for h in tl.static_range(2):
            p = (b >> (4 * g + 2 * h)) & 3
            lo = x0 if g == 0 else x2
            hi = x1 if g == 0 else x3
            xh = tl.where(p < 2, lo >> (16 * p), hi >> (16 * (p - 2))) & 0xFFFF
            out += _sbyte(vc, 2 * g + h).to(tl.float32) * _half_to_f32(xh, IS_BF16)
    return out


@triton.jit(do_not_specialize=["ONE"])
def _sparse24_gemv_w16_kernel(
    x_ptr,  # (M, K/2) int32 view of fp16/bf16 x
    v_ptr,  # (N, K/8) int32 view of the int8 kept values (two groups per word)
    meta_ptr,  # (N, MW) int32
    sw_ptr,  # (N,) channel scales
    out_ptr,  # (M, N)
    ws_ptr,
    lock_ptr,
    M,
    N,
    VW,  # value words per row = K / 8
    MW,
    WORDS_PER_SPLIT,  # meta words per split, a multiple of BW
    S,
    stride_xm,  # in int32 words
    stride_om,
    ZERO,  # 0, at run time (see `_sparse24_gemv_iw_kernel`)
    ONE,  # 1, at run time and not specialized (see `_sparse24_gemv_iw_kernel`)
    IS_BF16: tl.constexpr,
    USE_ASM: tl.constexpr,
    BN: tl.constexpr,
    BW: tl.constexpr,  # meta words per step
    EVEN: tl.constexpr = False,  # K a multiple of 32 and MW of BW: every tile whole, no masked load
    EVICT: tl.constexpr = "",  # the weight loads' L2 eviction policy
):
    """One-token 2:4 GEMV on int8 values and fp16/bf16 x (weight-only int8): y = (sum x w_int) * s_w, fp32 products
    and sums. `_sparse24_gemv_iw_kernel`'s tiles (BW meta words, BN rows, 4 value words) and loads; a meta word's 16
    activation words come as four (BW, BN, 4) tiles."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_w = tl.arange(0, BW)
    offs_c = tl.arange(0, 4)
    w_start = pid_s * WORDS_PER_SPLIT
    w_end = tl.minimum(w_start + WORDS_PER_SPLIT, MW)
    v_rows, m_rows, x_rows = _meta_word_rows(v_ptr, meta_ptr, x_ptr, m, stride_xm, offs_n, offs_c, N, VW, MW, ZERO)

    mw = w_start + offs_w
    meta, v = _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN, EVICT)
    mw += BW
    meta_nx, v_nx = _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN, EVICT)
    # two accumulators (value words 0, 2 and 1, 3): each meta word's FMAs form two dependent chains of 8, not one of 16
    acc = tl.zeros([BW, BN], dtype=tl.float32)
    acc2 = tl.zeros([BW, BN], dtype=tl.float32)
    for w0 in range(w_start, w_end, BW):
        xw = (w0 + offs_w) * 16
        ok = ((w0 + offs_w) < w_end)[:, None, None]
        xa, xb = _gemv_x8(x_rows, xw, ok, offs_c, 4 * VW, EVEN)
        xc, xd = _gemv_x8(x_rows, xw + 8, ok, offs_c, 4 * VW, EVEN)
        v0, v1, v2, v3 = _split4(v, BW, BN)
        x0, x1, x2, x3 = _split4(xa, BW, BN)
        x4, x5, x6, x7 = _split4(xb, BW, BN)
        x8, x9, x10, x11 = _split4(xc, BW, BN)
        x12, x13, x14, x15 = _split4(xd, BW, BN)
        if USE_ASM:
            acc = tl.inline_asm_elementwise(_W16_ASM[4 * IS_BF16], "=f,r,r,r,r,r,r,f", [meta, v0, x0, x1, x2, x3, acc],
                                            dtype=tl.float32, is_pure=True, pack=1)
            acc2 = tl.inline_asm_elementwise(_W16_ASM[4 * IS_BF16 + 1], "=f,r,r,r,r,r,r,f",
                                             [meta, v1, x4, x5, x6, x7, acc2], dtype=tl.float32, is_pure=True, pack=1)
            acc = tl.inline_asm_elementwise(_W16_ASM[4 * IS_BF16 + 2], "=f,r,r,r,r,r,r,f",
                                            [meta, v2, x8, x9, x10, x11, acc], dtype=tl.float32, is_pure=True, pack=1)
            acc2 = tl.inline_asm_elementwise(_W16_ASM[4 * IS_BF16 + 3], "=f,r,r,r,r,r,r,f",
                                             [meta, v3, x12, x13, x14, x15, acc2], dtype=tl.float32, is_pure=True, pack=1)
        else:
            acc += _w16_ref(meta, v0, x0, x1, x2, x3, 0, IS_BF16) + _w16_ref(meta, v2, x8, x9, x10, x11, 2, IS_BF16)
            acc2 += _w16_ref(meta, v1, x4, x5, x6, x7, 1, IS_BF16) + _w16_ref(meta, v3, x12, x13, x14, x15, 3, IS_BF16)
        meta, v = meta_nx, v_nx
        mw += BW
        meta_nx, v_nx = _meta_word_tile(m_rows, v_rows, mw, w_end, ONE, offs_c, VW, EVEN, EVICT)

    out = tl.sum(acc + acc2, axis=0) * tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


@triton.jit
def _sparse24_mma_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16
    v_ptr,  # (N, K/2)
    meta_ptr,  # (N, MW) int32
    sw_ptr,  # (N,) (INT8 only)
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    MW,
    K_PER_SPLIT,  # multiple of BK
    S,
    # strides
    stride_xm,
    stride_om,
    # meta
    INT8: tl.constexpr,
    DOT_F32: tl.constexpr,
    EPS: tl.constexpr,
    BN: tl.constexpr,
    BM: tl.constexpr,
    BK: tl.constexpr,  # multiple of 32
    XQ: tl.constexpr = False,  # INT8 with x quantized once before (config "xq"): x_ptr int8, sx_ptr its token scales
    M_FAST: tl.constexpr = False,  # grid (m tiles, n tiles, split), as kernels/w8a8.py's m_fast
    sx_ptr=None,
):
    pid_m, pid_n = swap_ab_pids(M_FAST)
    pid_s = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    offs_g = tl.arange(0, BK // 4)  # groups of 4 in the tile
    offs_t = tl.arange(0, 2)
    offs_c = tl.arange(0, 4)
    offs_k = tl.arange(0, BK)
    half_k = K // 2

    if XQ:
        sx = tl.load(sx_ptr + offs_m, mask=m_mask, other=0.0)
        acc = tl.zeros([BN, BM], dtype=tl.int32)
    elif INT8:
        sx = _row_scales(x_ptr, offs_m, m_mask, stride_xm, K, BK, EPS)
        acc = tl.zeros([BN, BM], dtype=tl.int32)
    else:
        acc = tl.zeros([BN, BM], dtype=tl.float32)

    k_start = pid_s * K_PER_SPLIT
    for kk in range(0, K_PER_SPLIT, BK):
        k0 = k_start + kk
        g_abs = k0 // 4 + offs_g  # (G,) absolute group index
        g_mask = (g_abs * 4) < K
        slot = g_abs[:, None] * 2 + offs_t[None, :]  # (G, 2)
        vals = tl.load(v_ptr + offs_n[:, None, None] * half_k + slot[None, :, :],
                       mask=n_mask[:, None, None] & g_mask[None, :, None], other=0)  # (BN, G, 2)
        words = tl.load(meta_ptr + offs_n[:, None] * MW + (g_abs // 8)[None, :], mask=n_mask[:, None] & g_mask[None, :], other=0)
        shift = 4 * (g_abs % 8)  # two 2-bit fields per group
        p0 = (words >> shift[None, :]) & 3  # (BN, G)
        p1 = (words >> (shift + 2)[None, :]) & 3
        v0, v1 = tl.split(vals)  # (BN, G) each
        zero = tl.zeros([BN, BK // 4, 4], dtype=vals.dtype)
        dense = tl.where(p0[:, :, None] == offs_c[None, None, :], v0[:, :, None],
                         tl.where(p1[:, :, None] == offs_c[None, None, :], v1[:, :, None], zero))  # (BN, G, 4)
        dense = tl.reshape(dense, [BN, BK])
        k_mask = (k0 + offs_k) < K
        xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + (k0 + offs_k)[:, None], mask=k_mask[:, None] & m_mask[None, :], other=0)
        if XQ:
            acc = tl.dot(dense, xt, acc, out_dtype=tl.int32)
        elif INT8:
            acc = tl.dot(dense, _quantize_tile(xt, sx[None, :]), acc, out_dtype=tl.int32)
        elif DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
            acc = tl.dot(dense.to(tl.float32), xt.to(tl.float32), acc)
        else:
            acc = tl.dot(dense, xt, acc)

    if INT8:
        sw = tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        out = acc.to(tl.float32) * sw[:, None] * sx[None, :]
    else:
        out = acc
    swap_ab_store(out, out_ptr, stride_om, offs_n, n_mask, offs_m, m_mask, ws_ptr, lock_ptr, pid_n, pid_m, pid_s, S, N,
                  BN, BM)


@triton.jit
def _densify_kernel(v_ptr, meta_ptr, out_ptr, N, G, VW, MW, WIDE: tl.constexpr, BN: tl.constexpr, BW: tl.constexpr,
                    s_ptr=None, SCALED: tl.constexpr = False, OUT_DT: tl.constexpr = tl.float16):
    """The dense weight of compress.sparse24 values + 2-bit positions in 32-bit words (the same bits as
    unpack_sparse24). v_ptr: the values as int32 words (N, VW); out_ptr: the dense weight as int32 words (N, G) for
    int8, (N, 2G) for 16-bit values; G = K / 4 groups of 4 columns, MW meta words of 8 groups each per row.
    Each program loads BW consecutive meta words of BN rows and the value words they cover, contiguously (16-byte
    loads), widens them in registers (tl.join) and writes whole words: int8, a value word holds two groups and a
    group's 4 dense bytes are one output word; 16-bit, a value word is one group and its columns two output words.
    H100 (bench/results/h100/kernels_s14/README.md, call 8), Llama-3-8B down_proj: 35.6 us int8, 68.1 us fp16, ~2.6
    TB/s of bytes read + written; loading each meta word once per group instead (8 times) took 71.1 / 102.9 us, a
    (BN, G, 4)-lane tile reshaped to (BN, K) 133.8 / 140.5 us; torch's scatter ~390 us (session 12's table, with its GEMM
    taken off). SCALED (int8 values, session 17): the dequantized weight instead, each int8 times its row's scale
    s_ptr in fp32, rounded once to OUT_DT (fp16 / bf16) -- two output words a group, as for 16-bit values."""
    pid_n = tl.program_id(0)
    pid_w = tl.program_id(1)
    offs_n = (pid_n * BN + tl.arange(0, BN)).to(tl.int64)
    n_mask = (offs_n < N)[:, None]
    offs_w = pid_w * BW + tl.arange(0, BW)
    words = tl.load(meta_ptr + offs_n[:, None] * MW + offs_w[None, :], mask=n_mask & (offs_w < MW)[None, :], other=0)
    shift = (4 * tl.arange(0, 8))[None, None, :]
    p0 = (words[:, :, None] >> shift) & 3  # (BN, BW, 8): 8 groups per meta word
    p1 = (words[:, :, None] >> (shift + 2)) & 3
    offs_g = pid_w * BW * 8 + tl.arange(0, BW * 8)  # the groups of these words, in order
    g_mask = n_mask & (offs_g < G)[None, :]
    if WIDE:  # one value word per group
        vw = tl.reshape(tl.load(v_ptr + offs_n[:, None] * VW + offs_g[None, :], mask=g_mask, other=0), [BN, BW, 8])
        v0 = vw & 0xFFFF
        v1 = (vw >> 16) & 0xFFFF
        lo = tl.where(p0 < 2, v0 << (16 * (p0 % 2)), 0) | tl.where(p1 < 2, v1 << (16 * (p1 % 2)), 0)
        hi = tl.where(p0 >= 2, v0 << (16 * (p0 % 2)), 0) | tl.where(p1 >= 2, v1 << (16 * (p1 % 2)), 0)
        offs_o = pid_w * BW * 16 + tl.arange(0, BW * 16)
        tl.store(out_ptr + offs_n[:, None] * (2 * G) + offs_o[None, :], tl.reshape(tl.join(lo, hi), [BN, BW * 16]),
                 mask=n_mask & (offs_o < 2 * G)[None, :])
    else:  # one value word per two groups: each word widened to both
        offs_v = pid_w * BW * 4 + tl.arange(0, BW * 4)
        vw = tl.load(v_ptr + offs_n[:, None] * VW + offs_v[None, :], mask=n_mask & (offs_v < VW)[None, :], other=0)
        vw = tl.reshape(tl.join(vw, vw), [BN, BW, 8])  # group j of a meta word: value word j // 2
        half = (16 * (tl.arange(0, 8) % 2))[None, None, :]
        v0 = (vw >> half) & 0xFF
        v1 = (vw >> (half + 8)) & 0xFF
        d = (v0 << (8 * p0)) | (v1 << (8 * p1))  # the group's 4 dense bytes
        if SCALED:
            sc = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[:, None, None]
            lo = _scaled_pair(d, 0, sc, OUT_DT) | (_scaled_pair(d, 1, sc, OUT_DT) << 16)
            hi = _scaled_pair(d, 2, sc, OUT_DT) | (_scaled_pair(d, 3, sc, OUT_DT) << 16)
            offs_o = pid_w * BW * 16 + tl.arange(0, BW * 16)
            tl.store(out_ptr + offs_n[:, None] * (2 * G) + offs_o[None, :], tl.reshape(tl.join(lo, hi), [BN, BW * 16]),
                     mask=n_mask & (offs_o < 2 * G)[None, :])
        else:
            tl.store(out_ptr + offs_n[:, None] * G + offs_g[None, :], tl.reshape(d, [BN, BW * 8]), mask=g_mask)


@triton.jit
def _scaled_pair(d, i: tl.constexpr, sc, OUT_DT: tl.constexpr):
    """Byte i of the dense words d (a signed int8) times sc, rounded to OUT_DT, as the low 16 bits of an int32."""
    b = ((d << (24 - 8 * i)) >> 24).to(tl.float32)  # arithmetic shift: the byte's sign
    return (b * sc).to(OUT_DT, fp_downcast_rounding="rtne").to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF


DENSIFY_TILE = (16, 32)  # (rows, meta words = 8 groups each) per program


def _check_packed(what: str, values: torch.Tensor, meta: torch.Tensor, k: int) -> int:
    """N of compress.sparse24 values + meta describing an (N, K) weight, else a one-line error."""
    n = values.shape[0]
    if k % 4 or tuple(values.shape) != (n, k // 2) or meta.dtype != torch.int32 or tuple(meta.shape) != (n, meta_words(k)):
        raise CompressError(f"{what}: values {tuple(values.shape)} / meta {tuple(meta.shape)} {meta.dtype} do not "
                            f"describe a ({n}, {k}) weight; expected ({n}, {k // 2}) and int32 ({n}, {meta_words(k)})")
    return n


def _launch_densify(values: torch.Tensor, meta: torch.Tensor, k: int, out: torch.Tensor, **scaled) -> torch.Tensor:
    """`_densify_kernel` over the whole weight into `out` ((N, K), written as 32-bit words); `scaled`: its SCALED
    arguments (s_ptr, SCALED, OUT_DT)."""
    n = values.shape[0]
    if n:
        v32 = values.contiguous().view(torch.int32)
        bn, bw = DENSIFY_TILE
        _densify_kernel[(triton.cdiv(n, bn), triton.cdiv(meta.shape[1], bw))](
            v32, meta.contiguous(), out.view(torch.int32), n, k // 4, v32.shape[1], meta.shape[1],
            WIDE=values.element_size() == 2, BN=bn, BW=bw, num_warps=4, **scaled)
    return out


@on_input_device
def densify_sparse24(values: torch.Tensor, meta: torch.Tensor, k: int) -> torch.Tensor:
    """The dense (N, K) weight of compress.sparse24 values + meta, in one launch (unpack_sparse24 is the reference,
    bit for bit; it also serves int8 layers whose K is not a multiple of 8). What the runtime's "dequantize, then
    the dense GEMM" paths build per call above a few tokens, where torch's scatter took ~0.39 ms for Llama-3-8B's
    down_proj (bench/results/h100/kernels_s14/README.md, calls 7-8: 35.6 us now for int8)."""
    what = "densify_sparse24"
    check_device(what, values, meta)
    n = _check_packed(what, values, meta, k)
    if values.element_size() != 2 and (values.dtype != torch.int8 or k % 8):
        return unpack_sparse24(values, meta, (n, k))
    return _launch_densify(values, meta, k, torch.empty(n, k, device=values.device, dtype=values.dtype))


@on_input_device
def dequantize_w8a16_sparse24(values: torch.Tensor, meta: torch.Tensor, k: int, w_scale: torch.Tensor,
                              dtype: torch.dtype) -> torch.Tensor:
    """The dense (N, K) weight of int8 compress.sparse24 values times their rows' scales, rounded once to `dtype`
    (fp16 / bf16): one launch of `_densify_kernel` (SCALED), where densify + cast + multiply read and wrote the
    weight three more times (the W8A16 "dequant+cublas" path, session 17). K not a multiple of 8: the reference."""
    what = "dequantize_w8a16_sparse24"
    check_device(what, values, meta, w_scale)
    n = _check_packed(what, values, meta, k)
    if values.dtype != torch.int8 or w_scale.numel() != n or dtype not in (torch.float16, torch.bfloat16):
        raise CompressError(f"{what}: expects int8 values with one scale per row and a 16-bit float dtype, got "
                            f"{values.dtype}, {w_scale.numel()} scales for {n} rows, {dtype}")
    if k % 8:
        return (unpack_sparse24(values, meta, (n, k)).float() * w_scale.reshape(n, 1).float()).to(dtype)
    return _launch_densify(values, meta, k, torch.empty(n, k, device=values.device, dtype=dtype),
                           s_ptr=w_scale.reshape(n).contiguous(), SCALED=True,
                           OUT_DT=tl.bfloat16 if dtype == torch.bfloat16 else tl.float16)


# `_expand_words`' widening on the GPU (session 15). A group's positions p0 < p1 (bits 4j.. of its meta word) put its
# kept values v0, v1 in columns p0, p1; PRMT picks the bytes of its result from {a, b} by one selector nibble each.
# 16-bit values (a = the value word v1:v0, b = 0): a column's two nibbles are 0x10 (v0), 0x32 (v1) or 0x54 (zero),
# so the selector of the group's 4 columns is 0x54545454 - (0x44 << 8 p0) - (0x22 << 8 p1): its low half builds
# columns 0-1, its high half columns 2-3. $4 meta word, $5 4j, $6 value word -> $0..$3 the columns.
_WIDEN16_ASM = tl.constexpr(
    "{ .reg .b32 t, a, b, s, z, lo, hi; shr.u32 t, $4, $5; shl.b32 a, t, 3; and.b32 a, a, 24; shl.b32 b, t, 1; "
    "and.b32 b, b, 24; mov.b32 s, 68; shl.b32 a, s, a; mov.b32 s, 34; shl.b32 b, s, b; mov.b32 s, 0x54545454; "
    "sub.u32 s, s, a; sub.u32 s, s, b; mov.b32 z, 0; prmt.b32 lo, $6, z, s; shr.u32 s, s, 16; prmt.b32 hi, $6, z, s; "
    "mov.b32 {$0, $1}, lo; mov.b32 {$2, $3}, hi; }")
# int8 (a = the value word of two groups, group j's values its bytes h, h + 1 with h = 2 (j % 2); b = 0): one nibble
# per column, 4 = zero: 0x4444 - ((4 - h) << 4 p0) - ((3 - h) << 4 p1). $1 meta word, $2 4j, $3 value word,
# $4 = 8 h (the pair's bit shift) -> $0 the group's 4 columns as one word.
_WIDEN8_ASM = tl.constexpr(
    "{ .reg .b32 t, a, b, s, z, h; shr.u32 t, $1, $2; shl.b32 a, t, 2; and.b32 a, a, 12; and.b32 b, t, 12; "
    "shr.u32 h, $4, 3; mov.b32 s, 4; sub.u32 s, s, h; shl.b32 a, s, a; mov.b32 s, 3; sub.u32 s, s, h; "
    "shl.b32 b, s, b; mov.b32 s, 0x4444; sub.u32 s, s, a; sub.u32 s, s, b; mov.b32 z, 0; prmt.b32 $0, $3, z, s; }")


@triton.jit
def _expand_words(v_ptr, offs_n, n_mask, words, w0, VW, WIDE: tl.constexpr, BN: tl.constexpr, BW: tl.constexpr,
                  VDT: tl.constexpr, USE_ASM: tl.constexpr = False):
    """The dense (BN, 32 * BW) weight tile of the meta words `words` (BN, BW) (words w0 .. w0 + BW - 1 of each row),
    widened in registers as `_densify_kernel` does; VDT the values' dtype (fp16 / bf16 / int8). The value words'
    offsets are one arange, so the loads stay 16-byte wide.
    USE_ASM (the GPU): PRMT builds each group's columns from its value word (_WIDEN16_ASM / _WIDEN8_ASM). The
    compare-and-select form below (the CPU interpreter's) takes ~36 SASS instructions a group in the sm_90 build of
    the tc kernel (fp16, 64 x 256 tiles, 4 warps: 1156 a K step per warp, 734 with PRMT); with it the kernel streamed
    ~1.6 TB/s on the H100, with PRMT 2.1-2.6 TB/s (bench/results/h100/kernels_s15/)."""
    shift = (4 * tl.arange(0, 8))[None, None, :]
    if WIDE:  # one value word (two 16-bit values) per group
        offs_v = w0 * 8 + tl.arange(0, BW * 8)
        vw = tl.load(v_ptr + offs_n[:, None] * VW + offs_v[None, :], mask=n_mask[:, None] & (offs_v < VW)[None, :], other=0)
        vw = tl.reshape(vw, [BN, BW, 8])
    else:  # int8: one value word per two groups
        offs_v = w0 * 4 + tl.arange(0, BW * 4)
        vw = tl.load(v_ptr + offs_n[:, None] * VW + offs_v[None, :], mask=n_mask[:, None] & (offs_v < VW)[None, :], other=0)
        vw = tl.reshape(tl.join(vw, vw), [BN, BW, 8])  # group j of a meta word: value word j // 2
    half = (16 * (tl.arange(0, 8) % 2))[None, None, :]  # int8: the bit offset of group j's values in its word
    if USE_ASM and WIDE:
        c0, c1, c2, c3 = tl.inline_asm_elementwise(_WIDEN16_ASM, "=h,=h,=h,=h,r,r,r", [words[:, :, None], shift, vw],
                                                   dtype=(tl.int16, tl.int16, tl.int16, tl.int16), is_pure=True, pack=1)
    elif USE_ASM:
        d = tl.inline_asm_elementwise(_WIDEN8_ASM, "=r,r,r,r,r", [words[:, :, None], shift, vw, half], dtype=tl.int32,
                                      is_pure=True, pack=1)
        c0 = d & 0xFF
        c1 = (d >> 8) & 0xFF
        c2 = (d >> 16) & 0xFF
        c3 = (d >> 24) & 0xFF
    else:
        p0 = (words[:, :, None] >> shift) & 3  # (BN, BW, 8): 8 groups per meta word, p0 < p1
        p1 = (words[:, :, None] >> (shift + 2)) & 3
        if WIDE:
            v0 = vw & 0xFFFF
            v1 = (vw >> 16) & 0xFFFF
        else:
            v0 = (vw >> half) & 0xFF
            v1 = (vw >> (half + 8)) & 0xFF
        c0 = tl.where(p0 == 0, v0, 0) | tl.where(p1 == 0, v1, 0)  # p0 < p1: column 0 can only be p0, 3 only p1
        c1 = tl.where(p0 == 1, v0, 0) | tl.where(p1 == 1, v1, 0)
        c2 = tl.where(p0 == 2, v0, 0) | tl.where(p1 == 2, v1, 0)
        c3 = tl.where(p1 == 3, v1, 0)
    dense = tl.reshape(tl.join(tl.join(c0, c2), tl.join(c1, c3)), [BN, BW * 32])  # the value bits
    if WIDE:
        tile = dense.to(tl.int16).to(VDT, bitcast=True)
    else:
        tile = dense.to(tl.int8)  # the low byte: two's complement wraps 128..255 to -128..-1
    return tile


@triton.jit
def _sparse24_tc_kernel(
    x_ptr,  # (M, K) fp16/bf16, or int8 codes of quantize_per_token (INT8)
    sx_ptr,  # (M,) token scales (INT8)
    v_ptr,  # values as int32 words (N, VW)
    meta_ptr,  # (N, MW) int32
    sw_ptr,  # (N,) channel scales (INT8)
    out_ptr,  # (M, N)
    ws_ptr,
    lock_ptr,
    M,
    N,
    K,
    VW,
    MW,
    W_PER_SPLIT,  # meta words per K split, a multiple of BW
    S,
    stride_xm,
    stride_om,
    INT8: tl.constexpr,
    VDT: tl.constexpr,
    DOT_F32: tl.constexpr,
    BN: tl.constexpr,
    BM: tl.constexpr,
    BW: tl.constexpr,  # meta words per K step: 32 * BW columns
    M_FAST: tl.constexpr,
    USE_ASM: tl.constexpr = False,  # `_expand_words`' PRMT widening (the GPU; config "expand": "select" turns it off)
    W8A16: tl.constexpr = False,  # int8 values on x as it is (weight-only int8 on 2:4), per-channel sw
):
    """2:4 tensor-core GEMM (weights on the left, "swap AB"): each K step loads BW meta words of BN rows and the value
    words they cover (16-byte loads), widens them to the dense tile in registers (`_expand_words`) and feeds tl.dot.
    The weights are read once at 0.53 (fp16) / 0.56 (int8) of their dense bytes. W8A16: the widened int8 tile is
    converted to x's dtype (exact: |v| <= 128 fits fp16 and bf16), the products sum in fp32 and each row is scaled
    once at the end, so the sums never hold rounded weights."""
    pid_m, pid_n = swap_ab_pids(M_FAST)
    pid_s = tl.program_id(2)
    offs_n = (pid_n * BN + tl.arange(0, BN)).to(tl.int64)
    n_mask = offs_n < N
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    acc = tl.zeros([BN, BM], dtype=tl.int32 if INT8 else tl.float32)
    w_start = pid_s * W_PER_SPLIT
    for ww in range(0, W_PER_SPLIT, BW):
        offs_w = w_start + ww + tl.arange(0, BW)
        words = tl.load(meta_ptr + offs_n[:, None] * MW + offs_w[None, :], mask=n_mask[:, None] & (offs_w < MW)[None, :],
                        other=0)
        dense = _expand_words(v_ptr, offs_n, n_mask, words, w_start + ww, VW, not (INT8 or W8A16), BN, BW, VDT, USE_ASM)
        offs_k = (w_start + ww) * 32 + tl.arange(0, BW * 32)
        xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None], mask=(offs_k < K)[:, None] & m_mask[None, :],
                     other=0)
        if INT8:
            acc = tl.dot(dense, xt, acc, out_dtype=tl.int32)
        elif DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
            acc = tl.dot(dense.to(tl.float32), xt.to(tl.float32), acc)
        elif W8A16:
            acc = tl.dot(dense.to(xt.dtype), xt, acc)
        else:
            acc = tl.dot(dense, xt, acc)
    if INT8:
        sw = tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        sx = tl.load(sx_ptr + offs_m, mask=m_mask, other=0.0)
        out = acc.to(tl.float32) * sw[:, None] * sx[None, :]
    elif W8A16:
        out = acc * tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
    else:
        out = acc
    swap_ab_store(out, out_ptr, stride_om, offs_n, n_mask, offs_m, m_mask, ws_ptr, lock_ptr, pid_n, pid_m, pid_s, S, N,
                  BN, BM)


def _launch_tc(x2, values, meta, sw, out, cfg: dict, w8a16: bool = False) -> torch.Tensor:
    """`_sparse24_tc_kernel` (config kind "tc"): int8 values on x quantized once (quantize_per_token), 16-bit values
    -- or int8 values with `w8a16` -- on x as it is. K split by the config's "split" / "fit" / "waves"
    (kernels._common.config_chunks)."""
    m, k = x2.shape
    n = values.shape[0]
    int8 = values.dtype == torch.int8 and not w8a16
    v32 = values.contiguous().view(torch.int32)
    mw = meta.shape[1]
    bw = cfg["BW"]
    n_tiles, m_tiles = triton.cdiv(n, cfg["BN"]), triton.cdiv(m, cfg["BM"])
    steps = triton.cdiv(mw, bw)
    split, per = config_chunks(n_tiles * m_tiles, steps, cfg, x2.device)
    ws, locks = splitk_buffers(x2.device, n_tiles * m_tiles, split, cfg["BN"] * cfg["BM"])
    xin, sx = quantize_per_token(x2, recip=True) if int8 else (x2, None)
    vdt = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.int8: tl.int8}[values.dtype]
    m_fast = bool(cfg.get("m_fast"))
    _sparse24_tc_kernel[(m_tiles, n_tiles, split) if m_fast else (n_tiles, m_tiles, split)](
        xin, sx, v32, meta.contiguous(), sw, out, ws, locks, m, n, k, v32.shape[1], mw, per * bw, split, xin.stride(0),
        out.stride(0), INT8=int8, VDT=vdt, DOT_F32=interpreter_dot_f32(x2.dtype) and not int8, BN=cfg["BN"], BM=cfg["BM"],
        BW=bw, M_FAST=m_fast, USE_ASM=not interpreting() and cfg.get("expand") != "select", W8A16=w8a16,
        num_warps=cfg["num_warps"], num_stages=cfg.get("num_stages", 3))
    return out


def _check(what, x, values, meta, w_scale):
    check_device(what, x, values, meta, w_scale)
    if values.dim() != 2 or meta.dim() != 2:
        raise CompressError(f"{what}: values and meta must be 2-D, got {tuple(values.shape)} and {tuple(meta.shape)}")
    n, half = values.shape
    k = x.shape[-1]
    if k % 4 != 0:
        raise CompressError(f"{what}: in_features={k} must be a multiple of 4 for 2:4 sparsity; keep this layer dense")
    if half * 2 != k:
        raise CompressError(f"{what}: values {tuple(values.shape)} hold in_features={half * 2}, but x has in_features={k}")
    if meta.dtype != torch.int32 or tuple(meta.shape) != (n, meta_words(k)):
        raise CompressError(f"{what}: meta {tuple(meta.shape)} {meta.dtype} does not match; expected int32 {(n, meta_words(k))} "
                            "from compress.packing.sparse24.pack_sparse24")
    return n, k


def _config(m: int, int8: bool = False, n: int = 0, k: int = 0) -> dict:
    """Kernel and tiles by M (measured on the H100: bench/results/h100/kernels/NOTES.md, kernels_s14/, kernels_s15/,
    kernels_s16/), and for int8 at one token by the layer's N x K where given. One token: the PRMT GEMVs; from 2 tokens
    the word-widening tensor-core kernel (above TC_MAX_M with 128 x 128 tiles)."""
    tuned = tuned_config("sparse24-int8" if int8 else "sparse24-fp16", m)
    if tuned:
        return tuned
    return _config_builtin(m, int8, n, k)


def _config_builtin(m: int, int8: bool = False, n: int = 0, k: int = 0) -> dict:
    """`_config` without COMPRESS_KERNEL_CONFIGS."""
    if m <= GEMV_MAX_M and int8:
        return _config_iw(n, k)
    if m <= GEMV_MAX_M:
        return _config_fw(n)
    if m > TC_MAX_M:
        return dict(TC_WIDE_CONFIG)
    cfg = dict(TC_CONFIG, BM=max(16, triton.next_power_of_2(m)))
    if m <= TC_DEEP_MAX_M:
        return dict(cfg, num_stages=4)
    if m > 32 and not int8:
        return dict(cfg, BN=128, num_warps=8)
    return cfg


IW_CONFIG = {"kind": "prmtw", "BN": 8, "BW": 32, "num_warps": 4, "waves": 1, "pdl": 1, "qwait": True, "qrecip": True,
             "evict": "evict_first"}


def _config_iw(n: int, k: int) -> dict:
    """The one-token 2:4 int8 GEMV (`_sparse24_gemv_iw_kernel`, session 16) by the layer's shape. Sessions 16's H100
    sweeps (bench/results/h100/kernels_s16/, calls 1-4: 48 tile / split / quantizer variants on the 8 Llama-3 shapes,
    each run against the dense W8A8 one-token paths in the same process):
    - x quantized by `quantize_per_token` under PDL, as the dense GEMV does ("pdl", "qwait", "qrecip"): every program
      quantizing x itself (the old kernel's way, and a "fused" mode of this kernel, since removed) was slower on every
      large layer (8B down 21.7 against 17.6 us), as was an L2 prefetch of the next lines before the wait (8B gate/up
      16.0 -> 18.8 us);
    - 8 rows x 32 meta words a step on 4 warps, K unsplit where the tiles fill one wave: median 1.27-1.29x of dense
      W8A8 (16 x 32 two waves 1.24x; session 15's kernel 1.04-1.05x in the same calls);
    - K > 8192 (a long row, whose quantizer runs longer before the wait): 64 meta words a step, so the two tiles
      requested before the wait are twice the bytes (8B down 16.8 -> 15.7 us; 70B q/o, K = 8192, 17.1 -> 18.3 the
      other way);
    - N <= 2048 (k/v): 4 rows x 128 meta words, twice the programs (8B k/v 5.2 -> 3.7 us, 70B k/v 6.8 -> 4.8);
    - the weights loaded with L2 policy evict_first (call 9, over these tiles): median 1.333x -> 1.368x, 6 of 8 shapes
      faster (8B down 15.58 -> 14.73 us), 8B and 70B gate/up 0.4-1.5% slower; a third tile in registers was slower
      on every large layer (70B q/o 16.91 -> 19.42 us) and is not offered."""
    if n and n <= 2048:
        return dict(IW_CONFIG, BN=4, BW=128)
    if k > 8192:
        return dict(IW_CONFIG, BW=64)
    return dict(IW_CONFIG)


FW_CONFIG = {"kind": "prmtw", "BN": 4, "BQ": 64, "num_warps": 4, "waves": 1, "evict": "evict_first"}


def _config_fw(n: int) -> dict:
    """The one-token 2:4 GEMV on fp16/bf16 values (`_sparse24_gemv_fw_kernel`, session 16) by the layer's N. Session
    16's H100 sweep (bench/results/h100/kernels_s16/, call 11: 10 tilings on the 8 Llama-3 shapes, each against dense
    fp16 F.linear in the same process) over session 15's value-word GEMV (16 x 8 meta words on 4 warps, 4 waves;
    median 1.447x over fp16): 4 rows x 64 quads (1 KB of values a row) a step on 4 warps, K unsplit where the tiles
    fill one wave, weights loaded evict_first, median 1.734x, faster on all 8 shapes (8B down 29.89 -> 23.84 us);
    N <= 2048 (k/v): 128 quads a step (8B k/v 4.30 -> 4.10 us, 70B k/v 6.96 -> 6.20)."""
    if n and n <= 2048:
        return dict(FW_CONFIG, BQ=128)
    return dict(FW_CONFIG)


def alternative_configs(m: int, int8: bool = False) -> dict[str, dict]:
    """Tilings besides `_config`'s worth timing per layer (the runtime's path table offers each as a path).
    fp16/bf16 at 33..TC_MAX_M tokens: 64 x 64 tiles on 4 warps. Session 15, call 4 (bench/results/h100/kernels_s15/,
    each config timed 2-3 times at 48 and 64 tokens): faster than the 64 x 128 tiles on 8 warps on the 8B layers (8B
    q/o 25.1 -> 21.1 us, 8B down 54.3 -> 50.1), slower on 70B k/v and the 70B MLP (70B gate/up 152.7 -> 188.8); which
    wins depends on the shape, and `_config` does not see it."""
    if int8 or not 32 < m <= TC_MAX_M:
        return {}
    return {"tc64x64": dict(TC_CONFIG, BM=max(16, triton.next_power_of_2(m)))}


def _mma_config(m: int) -> dict:
    """`_sparse24_mma_kernel`'s tiles by M, for the int8 layers "tc" cannot take (in_features not a multiple of 8: no
    32-bit value words)."""
    if m <= 16:
        return {"kind": "mma", "BM": 16, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3}
    if m <= 64:
        return {"kind": "mma", "BM": triton.next_power_of_2(m), "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 3}
    return {"kind": "mma", "BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 3}


def _gemv_grid(m: int, n: int, bn: int, steps: int, cfg: dict, device: torch.device):
    """The one-token GEMVs' grid (n_tiles, split, m) and its split-K buffers: BN rows a program, the K loop's `steps`
    steps split by the config (`config_chunks`). Returns (n_tiles, split, steps per split, workspace, locks)."""
    n_tiles = triton.cdiv(n, bn)
    split, per = config_chunks(n_tiles * m, steps, cfg, device)
    ws, locks = splitk_buffers(device, n_tiles * m, split, bn)
    return n_tiles, split, per, ws, locks


def _launch_iw(x2, values, meta, sw, out, cfg: dict) -> torch.Tensor:
    """`_sparse24_gemv_iw_kernel` (config kind "prmtw") on x quantized once by `quantize_per_token`. "pdl": launched
    with PDL behind the quantizer, its first two weight tiles requested before the wait; "qwait": the quantizer waits
    for the kernel before it, as kernels.w8a8's GEMV does; "qrecip", "qwarps", "qchunk": as there
    (`kernels.w8a8._quantize`). Session 16 also timed, and removed, every program quantizing x itself and an L2
    prefetch of each row's next 1-4 KB before the wait: both slower on every large layer
    (bench/results/h100/kernels_s16/, calls 1-2)."""
    m, k = x2.shape
    n = values.shape[0]
    mw = meta_words(k)
    bn, bw = cfg["BN"], cfg["BW"]
    n_tiles, split, per, ws, locks = _gemv_grid(m, n, bn, triton.cdiv(mw, bw), cfg, x2.device)
    pdl = bool(cfg.get("pdl")) and pdl_enabled(x2.device)
    xq, sx = _quantize(x2, cfg, pdl, 0)
    x32 = xq.view(torch.int32)
    _sparse24_gemv_iw_kernel[(n_tiles, split, m)](
        x32, sx, values.view(torch.int32), meta, sw, out, ws, locks, m, n, k // 8, mw, per * bw, split, x32.stride(0), n,
        0, 1, USE_ASM=not interpreting(), BN=bn, BW=bw, PDL=pdl, EVEN=k % 32 == 0 and mw % bw == 0,
        EVICT=cfg.get("evict", ""), num_warps=cfg["num_warps"], **({"launch_pdl": True} if pdl else {}))
    return out


def _launch_fw(x2, values, meta, out, cfg: dict) -> torch.Tensor:
    """`_sparse24_gemv_fw_kernel` (config kind "prmtw" on fp16/bf16 values): BN rows x BQ quads (4 groups, 16 columns)
    a step, K split by `config_chunks`; "evict": the weight loads' L2 policy."""
    m, k = x2.shape
    n = values.shape[0]
    bn, bq = cfg["BN"], cfg["BQ"]
    kq = triton.cdiv(k, 16)
    n_tiles, split, per, ws, locks = _gemv_grid(m, n, bn, triton.cdiv(kq, bq), cfg, x2.device)
    x32 = x2.view(torch.int32)
    _sparse24_gemv_fw_kernel[(n_tiles, split, m)](
        x32, values.view(torch.int32), meta, out, ws, locks, m, n, k // 4, meta_words(k), per * bq, split, x32.stride(0),
        n, 0, 1, IS_BF16=x2.dtype == torch.bfloat16, USE_ASM=not interpreting(), BN=bn, BQ=bq,
        EVEN=k % 16 == 0 and kq % bq == 0, EVICT=cfg.get("evict", ""), num_warps=cfg["num_warps"])
    return out


def _check_channel_scales(what: str, w_scale: torch.Tensor | None, n: int) -> None:
    """int8 values (W8A8 or W8A16) need one scale per output channel; else a one-line error."""
    if w_scale is None or w_scale.numel() != n:
        got = "none" if w_scale is None else f"{w_scale.numel()} values"
        raise CompressError(f"{what}: int8 values need w_scale with one scale per output channel (N={n}), got {got}; "
                            "pass the layer's (N,) weight_scale")


def _launch(x, values, meta, w_scale, config: dict | None = None) -> torch.Tensor:
    int8 = values.dtype == torch.int8
    what = "sparse24_w8a8_linear" if int8 else "sparse24_linear"
    n, k = _check(what, x, values, meta, w_scale)
    if int8:
        _check_channel_scales(what, w_scale, n)
    if not int8 and values.dtype != x.dtype:
        raise CompressError(f"{what}: values are {values.dtype} but x is {x.dtype}; cast one to match")
    lead = x.shape[:-1]
    x2 = check_activation(what, x, k)
    m = x2.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0:
        return out.reshape(*lead, n)
    cfg = dict(config or _config(m, int8, n, k))
    sw = w_scale.reshape(n) if int8 else values  # sw_ptr unused unless INT8
    mw = meta_words(k)
    if cfg["kind"] == "tc" and (not int8 or k % 8 == 0):
        return _launch_tc(x2, values, meta, sw if int8 else None, out, cfg).reshape(*lead, n)
    if cfg["kind"] == "tc":  # int8 values with K not a multiple of 8: no 32-bit value words; the expand kernel
        cfg = _mma_config(m)
    if cfg["kind"] == "prmtw" and int8 and k % 8 == 0:
        return _launch_iw(x2, values, meta, sw, out, cfg).reshape(*lead, n)
    if cfg["kind"] == "prmtw" and not int8:
        return _launch_fw(x2, values, meta, out, cfg).reshape(*lead, n)
    if cfg["kind"] == "prmtw":  # a meta word per asm needs int8 values in 32-bit words; else the byte-wise GEMV
        cfg["kind"] = "prmt"
    if cfg["kind"] == "prmt" and (not int8 or k % 8 == 0):
        bw = cfg["BW"]
        n_tiles, split, per, ws, locks = _gemv_grid(m, n, cfg["BN"], triton.cdiv(mw, bw), cfg, x.device)
        if int8 and cfg.get("fused"):  # each program quantizes x itself: no quantizer launch
            _sparse24_gemv_i_kernel[(n_tiles, split, m)](
                x2, sw, values.view(torch.int32), meta, sw, out, ws, locks, m, n, k // 8, mw, per * bw, split,
                x2.stride(0), n, USE_ASM=not interpreting(), BN=cfg["BN"], BW=bw, X_FLOAT=True, K=k,
                PRO_BK=min(4096, triton.next_power_of_2(k)), num_warps=cfg["num_warps"])
        elif int8:
            pdl = cfg.get("pdl", 0) if pdl_enabled(x2.device) else 0
            xq, sx = quantize_per_token(x2, early=pdl > 0)
            x32 = xq.view(torch.int32)
            pf = 1 << (max(128, min(pdl, per * bw * 16)).bit_length() - 1) if pdl else 0  # bytes of each row's split
            _sparse24_gemv_i_kernel[(n_tiles, split, m)](
                x32, sx, values.view(torch.int32), meta, sw, out, ws, locks, m, n, k // 8, mw, per * bw, split,
                x32.stride(0), n, USE_ASM=not interpreting(), BN=cfg["BN"], BW=bw, PDL_PREFETCH=pf,
                num_warps=cfg["num_warps"], **({"launch_pdl": True} if pdl else {}))
        else:
            x32 = x2.view(torch.int32)
            _sparse24_gemv_f_kernel[(n_tiles, split, m)](
                x32, values.view(torch.int32), meta, out, ws, locks, m, n, k // 4, mw, per * bw, split, x32.stride(0), n,
                IS_BF16=x.dtype == torch.bfloat16, USE_ASM=not interpreting(), BN=cfg["BN"], BW=bw,
                num_warps=cfg["num_warps"])
    elif cfg["kind"] in ("gemv", "prmt"):
        bw = cfg["BW"]
        n_tiles, split, per, ws, locks = _gemv_grid(m, n, cfg["BN"], triton.cdiv(mw, bw), cfg, x.device)
        xin, sx = quantize_per_token(x2) if int8 else (x2, sw)  # sx_ptr unused unless INT8
        _sparse24_gemv_kernel[(n_tiles, split, m)](
            xin, sx, values, meta, sw, out, ws, locks, m, n, k, mw, per * bw, split, xin.stride(0), n,
            INT8=int8, EPS=ACT_EPS, BN=cfg["BN"], BW=bw, XB=cfg.get("XB", False), num_warps=cfg["num_warps"],
        )
    else:
        bk = cfg["BK"]
        n_tiles, m_tiles = triton.cdiv(n, cfg["BN"]), triton.cdiv(m, cfg["BM"])
        steps = triton.cdiv(k, bk)
        split, per = config_chunks(n_tiles * m_tiles, steps, cfg, x.device)
        ws, locks = splitk_buffers(x.device, n_tiles * m_tiles, split, cfg["BN"] * cfg["BM"])
        xq = int8 and bool(cfg.get("xq"))
        xin, sx = quantize_per_token(x2, recip=True) if xq else (x2, None)
        m_fast = bool(cfg.get("m_fast"))
        _sparse24_mma_kernel[(m_tiles, n_tiles, split) if m_fast else (n_tiles, m_tiles, split)](
            xin, values, meta, sw, out, ws, locks, m, n, k, mw, per * bk, split, xin.stride(0), n,
            INT8=int8, DOT_F32=interpreter_dot_f32(x.dtype) and not int8, EPS=ACT_EPS, BN=cfg["BN"], BM=cfg["BM"], BK=bk,
            XQ=xq, M_FAST=m_fast, sx_ptr=sx, num_warps=cfg["num_warps"], num_stages=cfg.get("num_stages", 3),
        )
    return out.reshape(*lead, n)


W16_CONFIG = {"kind": "prmtw", "BN": 8, "BW": 32, "num_warps": 4, "waves": 1, "evict": "evict_first"}
# From here the dequantized weight (one launch, `dequantize_w8a16_sparse24`) + cuBLAS: session 17, call 11, at 1024
# tokens faster than the 128 x 128 tensor-core tiles on all 8 Llama-3 shapes (8B down 380.0 -> 215.9 us); at 256 on 5
# of 8. (The runtime's path table times both per layer.)
W16_DENSE_MIN_M = 1024


def _config_w8a16(m: int, n: int = 0, k: int = 0) -> dict:
    """Weight-only int8 on 2:4 (int8 values, x as it is).

    One token: the PRMT GEMV `_sparse24_gemv_w16_kernel`, K unsplit where the tiles fill one wave, weights
    evict_first, tiles by the layer's shape. Its time follows how the grid fits the programs an SM holds (8 of the
    4-warp ones; session 18, bench/results/h100/kernels_s18/), from the H100 sweeps of sessions 17 (call 2) and 18
    (calls 4, 14: 20 tilings on the 8 Llama-3 shapes):
    - by default 8 rows x 32 meta words on 4 warps;
    - N <= 2048 (k/v): 4 x 64 on 8 warps (70B k/v 5.88 -> 4.98 us, 8B k/v 3.92 -> 3.71);
    - N >= 16384 with K <= 8192 (70B gate/up, fused 8B gate/up): 32 x 8, 896 programs in one wave (70B gate/up
      76.1 -> 69.9 us; 16 x 16 made 1792 programs, 1.7 waves);
    - N >= 8192 with K <= 8192 (70B q/o, 8B gate/up): 16 x 16 (8B gate/up 23.2 -> 20.0 us);
    - N <= 4096 otherwise (8B q/o, 8B down): 8 warps (7.68 -> 7.47, 18.81 -> 18.55 us).
    On the shapes where none of these changed, the served tiles were within 1% of the best of the 20.
    From 2 tokens the fp16 values' tensor-core tiles (`_config`), on int8 value words; from W16_DENSE_MIN_M the
    dequantized weight and cuBLAS. COMPRESS_KERNEL_CONFIGS overrides it under "sparse24-w8a16"."""
    tuned = tuned_config("sparse24-w8a16", m)
    if tuned:
        return tuned
    if m >= W16_DENSE_MIN_M:
        return {"kind": "dense"}
    if m > GEMV_MAX_M:  # the built-in tiles: a "sparse24-fp16" entry of COMPRESS_KERNEL_CONFIGS is for fp16 values
        return _config_builtin(m)
    if n and n <= 2048:
        return dict(W16_CONFIG, BN=4, BW=64, num_warps=8)
    if n >= 16384 and k and k <= 8192:
        return dict(W16_CONFIG, BN=32, BW=8)
    if n >= 8192 and k and k <= 8192:
        return dict(W16_CONFIG, BN=16, BW=16)
    if n and n <= 4096:
        return dict(W16_CONFIG, num_warps=8)
    return dict(W16_CONFIG)


def _launch_w16(x2, values, meta, sw, out, cfg: dict) -> torch.Tensor:
    """`_sparse24_gemv_w16_kernel` (config kind "prmtw" for W8A16): BN rows x BW meta words a step, K split by
    `config_chunks`; "evict": the weight loads' L2 policy."""
    m, k = x2.shape
    n = values.shape[0]
    mw = meta_words(k)
    bn, bw = cfg["BN"], cfg["BW"]
    n_tiles, split, per, ws, locks = _gemv_grid(m, n, bn, triton.cdiv(mw, bw), cfg, x2.device)
    x32 = x2.view(torch.int32)
    _sparse24_gemv_w16_kernel[(n_tiles, split, m)](
        x32, values.view(torch.int32), meta, sw, out, ws, locks, m, n, k // 8, mw, per * bw, split, x32.stride(0), n,
        0, 1, IS_BF16=x2.dtype == torch.bfloat16, USE_ASM=not interpreting(), BN=bn, BW=bw,
        EVEN=k % 32 == 0 and mw % bw == 0, EVICT=cfg.get("evict", ""), num_warps=cfg["num_warps"])
    return out


def _launch_w8a16(x, values, meta, w_scale, config: dict | None = None) -> torch.Tensor:
    """W8A16 on 2:4 weights, x as it is: the one-token PRMT GEMV (kind "prmtw") or the tensor-core kernel (kind
    "tc"); kind "dense", and layers whose in_features is not a multiple of 8 (no 32-bit value words), run densify +
    F.linear on the weight dequantized in x's dtype."""
    what = "sparse24_w8a16_linear"
    n, k = _check(what, x, values, meta, w_scale)
    if values.dtype != torch.int8:
        raise CompressError(f"{what}: values must be int8 (weight-only int8 on 2:4), got {values.dtype}; "
                            "fp16/bf16 values go to sparse24_linear")
    _check_channel_scales(what, w_scale, n)
    lead = x.shape[:-1]
    x2 = check_activation(what, x, k)
    m = x2.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0:
        return out.reshape(*lead, n)
    cfg = dict(config or _config_w8a16(m, n, k))
    sw = w_scale.reshape(n)
    if cfg["kind"] == "prmtw" and k % 8 == 0:
        return _launch_w16(x2, values, meta, sw, out, cfg).reshape(*lead, n)
    if cfg["kind"] == "tc" and k % 8 == 0:
        return _launch_tc(x2, values, meta, sw, out, cfg, w8a16=True).reshape(*lead, n)
    return F.linear(x2, dequantize_w8a16_sparse24(values, meta, k, sw, x.dtype)).reshape(*lead, n)


def _sparse24_op_impl(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    return _launch(x, values, meta, None)


_sparse24_op = torch.library.custom_op("compress::sparse24_linear", _sparse24_op_impl, mutates_args=())


@_sparse24_op.register_fake
def _(x, values, meta):
    return x.new_empty(*x.shape[:-1], values.shape[0])


def _sparse24_w8a8_op_impl(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    return _launch(x, values, meta, w_scale)


_sparse24_w8a8_op = torch.library.custom_op("compress::sparse24_w8a8_linear", _sparse24_w8a8_op_impl, mutates_args=())


@_sparse24_w8a8_op.register_fake
def _(x, values, meta, w_scale):
    return x.new_empty(*x.shape[:-1], values.shape[0])


def _sparse24_w8a16_op_impl(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    return _launch_w8a16(x, values, meta, w_scale)


_sparse24_w8a16_op = torch.library.custom_op("compress::sparse24_w8a16_linear", _sparse24_w8a16_op_impl, mutates_args=())


@_sparse24_w8a16_op.register_fake
def _(x, values, meta, w_scale):
    return x.new_empty(*x.shape[:-1], values.shape[0])


@on_input_device
def sparse24_linear(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias), W 2:4 sparse as compress.sparse24 fp16/bf16 values (N, K/2) + meta (N, K/32)."""
    op = _sparse24_op_impl if direct_call(x, values, meta) else torch.ops.compress.sparse24_linear
    y = op(x, values, meta)
    return y + bias if bias is not None else y


@on_input_device
def sparse24_linear_tiled(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, config: dict) -> torch.Tensor:
    """`sparse24_linear`'s math on the given tiles (one of `alternative_configs`): a plain launch, not the custom op,
    for the runtime's path table to time against the default (its CUDA graphs capture it like any launch)."""
    return _launch(x, values, meta, None, config)


@on_input_device
def sparse24_w8a8_linear(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor,
                         bias: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 on 2:4 weights: int8 values (N, K/2) + meta, per-channel w_scale (N,), per-token int8 x."""
    op = _sparse24_w8a8_op_impl if direct_call(x, values, meta, w_scale) else torch.ops.compress.sparse24_w8a8_linear
    y = op(x, values, meta, w_scale)
    return y + bias if bias is not None else y


@on_input_device
def sparse24_w8a16_linear(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor,
                          bias: torch.Tensor | None = None) -> torch.Tensor:
    """Weight-only int8 on 2:4 weights: int8 values (N, K/2) + meta, per-channel w_scale (N,), fp16/bf16 x as it is."""
    op = (_sparse24_w8a16_op_impl if direct_call(x, values, meta, w_scale)
          else torch.ops.compress.sparse24_w8a16_linear)
    y = op(x, values, meta, w_scale)
    return y + bias if bias is not None else y


@on_input_device
def sparse24_w8a16_linear_tiled(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor,
                                config: dict) -> torch.Tensor:
    """`sparse24_w8a16_linear`'s math on the given tiles: a plain launch, for the kernel sweeps."""
    return _launch_w8a16(x, values, meta, w_scale, config)


def sparse24_linear_ref(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch: unpack to dense, matmul in fp32."""
    w = unpack_sparse24(values, meta, (values.shape[0], x.shape[-1])).float()
    y = x.float() @ w.t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def sparse24_w8a8_linear_ref(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor,
                             bias: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch: unpack to dense int8, then the W8A8 reference math."""
    w = unpack_sparse24(values, meta, (values.shape[0], x.shape[-1]))
    q, s = quantize_per_token_ref(x)
    acc = (q.double() @ w.double().t()).float()
    y = acc * s[:, None] * w_scale.reshape(-1).float()[None, :]
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], values.shape[0])


def sparse24_w8a16_linear_ref(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, w_scale: torch.Tensor,
                              bias: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch: unpack to dense int8, dequantize (times the channel scale) in fp32, matmul in fp32."""
    w = unpack_sparse24(values, meta, (values.shape[0], x.shape[-1])).float() * w_scale.reshape(-1).float()[:, None]
    y = x.float() @ w.t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
