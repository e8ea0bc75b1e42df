"""W4A16: int4 group-wise weights (compress.int4 layout) times fp16/bf16 activations.

Kernels over the same packed weights (`_config` picks one per M; `kind` in a config names it):
- `tc`: weights as the left tensor-core operand ("swap AB": out^T = W @ x^T, so M = 1..16 fills only the
  16-wide side), dequantized in registers by inline PTX two at a time (PRMT/SHR/LOP3 with the 0x64006400
  magic, then one f16x2/bf16x2 subtract and multiply by the scale), NB blocks of 128 per product; wgmma.
  Optionally launched with programmatic dependent launch (config "pdl" / "chain", `_pdl`; by default above 32
  tokens, TILE_LAUNCH).
- `tcx`: activations as the left operand (mma.sync, out = x @ W^T), the same paired dequantization without
  the scale (applied per group to the fp32 partial sums), next block's activation slices prefetched.
- `dequant`: one Triton pass writing the fp16/bf16 weight, then cuBLAS (large M).
- `gemv` / `mma`: the scalar-dequantization kernels of session 2, kept for comparison in the sweeps.
All dequantize with the exponent trick: OR-ing a nibble u into the mantissa of 1024 (fp16) or 128 (bf16)
(2^23 in fp32 for the scalar kernels) gives base + u exactly, with no int->float conversion instruction.

Public: `w4a16_linear` (launcher, registered as torch.ops.compress.w4a16_linear), `w4a16_linear_ref` (plain
torch, the same math) and `dequantize_w4a16`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from compress.errors import CompressError
from compress.packing.int4 import BLOCK_K, GROUP_SIZES, dequantize_int4, num_groups, padded_k, unpack_int4
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from kernels._common import (check_activation, check_device, config_chain, interpreter_dot_f32, interpreting,
                             pdl_enabled, plan_split_fill, plan_split_k, pow2_floor, splitk_buffers, splitk_epilogue,
                             tuned_config)
from kernels.op_dispatch import direct_call, on_input_device

# Largest M of session 2's CUDA-core GEMV (kept for the sweeps; `_config` no longer picks it).
GEMV_MAX_M = 1


@triton.jit
def _w4a16_gemv_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16
    q_ptr,  # (N, Kp/8) int32, compress.int4 layout
    s_ptr,  # (G, N) scales
    z_ptr,  # (G, N) uint8 zero points (read only when ASYM)
    out_ptr,  # (M, N) in x's dtype
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    KW,  # words per weight row = Kp / 8
    BLOCKS_PER_SPLIT,
    TOTAL_BLOCKS,  # Kp / 128
    S,  # number of K splits
    # strides
    stride_xm,
    stride_om,
    # meta
    GROUP: tl.constexpr,
    ASYM: tl.constexpr,
    BN: tl.constexpr,
    EVEN_K: tl.constexpr,  # K % 128 == 0: no column masks
    EVEN_N: tl.constexpr,  # N % BN == 0: no row masks
):
    """One token (pid 2) x BN outputs x a K range (pid 1). Each thread owns whole 16-byte word groups
    of several rows, so one 32-bit load feeds 8 weights."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_r = tl.arange(0, 16)

    b_start = pid_s * BLOCKS_PER_SPLIT
    b_end = b_start + BLOCKS_PER_SPLIT
    if b_end > TOTAL_BLOCKS:
        b_end = TOTAL_BLOCKS
    q_rows = q_ptr + offs_n[:, None] * KW + offs_r[None, :]  # (BN, 16) words of one block
    # x addressed through a (BN, 16) pointer tile (same address down a column) so that the loaded
    # values land in the weights' register layout: a (16,) load broadcast later needs a shared-memory
    # layout conversion per slice (measured: 8 barriers per block in the SASS).
    x_tile = x_ptr + m * stride_xm + offs_r[None, :] + 0 * offs_n[:, None]

    acc = tl.zeros([BN, 16], dtype=tl.float32)
    # Software prefetch: the next block's words are in flight while this block computes.
    nxt = tl.load(q_rows + b_start * 16, mask=n_mask[:, None] & (b_start < b_end), other=0)
    for b in range(b_start, b_end):
        words = nxt.to(tl.uint32, bitcast=True)
        if EVEN_N:
            nxt = tl.load(q_rows + (b + 1) * 16, mask=(b + 1 < b_end), other=0)
        else:
            nxt = tl.load(q_rows + (b + 1) * 16, mask=n_mask[:, None] & (b + 1 < b_end), other=0)
        part = tl.zeros([BN, 16], dtype=tl.float32)
        for j in tl.static_range(8):
            k0 = b * 128 + j * 16
            if (j * 16) % GROUP == 0:  # first slice of a group: fetch its scale / zero point
                if EVEN_K and EVEN_N:
                    scale = tl.load(s_ptr + (k0 // GROUP) * N + offs_n).to(tl.float32)
                else:
                    scale = tl.load(s_ptr + (k0 // GROUP) * N + offs_n, mask=n_mask & (k0 < K), other=0.0).to(tl.float32)
                if ASYM:
                    zero = tl.load(z_ptr + (k0 // GROUP) * N + offs_n, mask=n_mask & (k0 < K), other=0).to(tl.float32) + 8388608.0
                else:
                    zero = tl.zeros([BN], dtype=tl.float32) + 8388616.0  # 2^23 + 8
            u = (words >> (4 * j)) & 0xF  # (BN, 16)
            w = (u | 0x4B000000).to(tl.float32, bitcast=True) - zero[:, None]  # exact u - z
            if EVEN_K:
                xv = tl.load(x_tile + k0).to(tl.float32)
            else:
                xv = tl.load(x_tile + k0, mask=((k0 + offs_r) < K)[None, :], other=0.0).to(tl.float32)
            part += w * xv
            if ((j + 1) * 16) % GROUP == 0:  # group complete: scale its partial sum once
                acc += part * scale[:, None]
                part = tl.zeros([BN, 16], dtype=tl.float32)

    out = tl.sum(acc, axis=1)  # (BN,)
    splitk_epilogue(out, out_ptr + m * stride_om + offs_n, n_mask, ws_ptr, lock_ptr, tl.arange(0, BN),
                    m * tl.num_programs(0) + pid_n, pid_s, S, BN)


@triton.jit
def _w4a16_mma_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16
    q_ptr,  # (N, Kp/8) int32
    s_ptr,  # (G, N)
    z_ptr,  # (G, N) uint8
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    KW,
    BLOCKS_PER_SPLIT,
    TOTAL_BLOCKS,
    S,
    # strides
    stride_xm,
    stride_om,
    # meta
    GROUP: tl.constexpr,
    ASYM: tl.constexpr,
    IS_BF16: tl.constexpr,
    DOT_F32: tl.constexpr,
    BN: tl.constexpr,
    BM: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    offs_r = tl.arange(0, 16)

    b_start = pid_s * BLOCKS_PER_SPLIT
    b_end = b_start + BLOCKS_PER_SPLIT
    if b_end > TOTAL_BLOCKS:
        b_end = TOTAL_BLOCKS
    q_rows = q_ptr + offs_n[:, None] * KW + offs_r[None, :]  # (BN, 16)
    xt_cols = x_ptr + offs_m[None, :] * stride_xm + offs_r[:, None]  # (16, BM): x^T slice

    acc = tl.zeros([BN, BM], dtype=tl.float32)
    for b in range(b_start, b_end):
        words = tl.load(q_rows + b * 16, mask=n_mask[:, None], other=0)
        part = tl.zeros([BN, BM], dtype=tl.float32)
        for j in tl.static_range(8):
            k0 = b * 128 + j * 16
            if (j * 16) % GROUP == 0:
                g_mask = n_mask & (k0 < K)
                scale = tl.load(s_ptr + (k0 // GROUP) * N + offs_n, mask=g_mask, other=0.0).to(tl.float32)
                if ASYM:
                    zero = tl.load(z_ptr + (k0 // GROUP) * N + offs_n, mask=g_mask, other=0).to(tl.float32)
                else:
                    zero = tl.zeros([BN], dtype=tl.float32) + 8.0
                if IS_BF16:
                    base = zero + 8388608.0  # 2^23 + z (fp32)
                else:
                    base = (zero + 1024.0).to(tl.float16)
            u = (words >> (4 * j)) & 0xF
            if IS_BF16:
                # fp32 trick then one cvt: bf16's 8-bit mantissa holds every u - z exactly.
                w = ((u | 0x4B000000).to(tl.float32, bitcast=True) - base[:, None]).to(tl.bfloat16)
            else:
                w = (u | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - base[:, None]
            xt = tl.load(xt_cols + k0, mask=((k0 + offs_r) < K)[:, None] & m_mask[None, :], other=0.0)
            if DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
                part = tl.dot(w.to(tl.float32), xt.to(tl.float32), part)
            else:
                part = tl.dot(w, xt, part)  # (BN, 16) @ (16, BM)
            if ((j + 1) * 16) % GROUP == 0:
                acc += part * scale[:, None]
                part = tl.zeros([BN, BM], dtype=tl.float32)

    ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    local = tl.arange(0, BN)[:, None] * BM + tl.arange(0, BM)[None, :]
    splitk_epilogue(acc, ptrs, n_mask[:, None] & m_mask[None, :], ws_ptr, lock_ptr, local,
                    pid_m * tl.num_programs(0) + pid_n, pid_s, S, BN * BM)


# ---------------------------------------------------------------------------------------------------------
# Tensor-core kernel with paired dequantisation ("tc"). Triton places the words tile straight in the mma
# A-operand register layout (checked in the SASS: no shared-memory round trip for the weights), where each
# thread holds the words of two consecutive k columns. One inline-asm block per pair: PRMT joins the two
# words' low (slices 0-3) or high (slices 4-7) halves, SHR brings slice j to bits 0 and 16, LOP3 masks both
# nibbles and ORs in the exponent of 1024 (fp16) or 128 (bf16), one f16x2/bf16x2 subtract removes base +
# zero point (exact) and one multiply applies the group scale: two weights per 4-5 instructions instead of
# 5-6 per weight in the scalar form. With the scale inside the weights, one tensor-core product spans NB
# blocks of 128 (several groups), so the per-slice activation staging and barriers are paid once per NB.
def _pair_asm(j: int, bf16: bool, asym: bool, scaled: bool) -> str:
    """PTX for one pair of weights of slice j: $1 $2 the two words; asym: $3 = base + zero (pair);
    scaled: the next operand = scales (pair). Output $0: two weights (u - z) [* s] as f16x2 / bf16x2."""
    sel = "0x5410" if j < 4 else "0x7632"
    jj = j % 4
    magic = "0x43004300" if bf16 else "0x64006400"
    sub, mul, fma = ("sub.rn.bf16x2", "mul.rn.bf16x2", "fma.rn.bf16x2") if bf16 else ("sub.f16x2", "mul.f16x2", "fma.rn.f16x2")
    body = f"prmt.b32 t, $1, $2, {sel}; "
    # fp16, symmetric, odd jj: mask the nibble where it sits (bits 4-7 / 20-23, inside fp16's 10-bit mantissa):
    # 1024 + 16u, then (1024 + 16u) / 16 - 72 = u - 8 in one exact fma; saves the shift.
    high_nibble = not bf16 and not asym and jj % 2 == 1
    shift = 4 * jj - (4 if high_nibble else 0)
    if shift:
        body += f"shr.u32 t, t, {shift}; "
    mask = "0x00F000F0" if high_nibble else "0x000F000F"
    body += f"lop3.b32 t, t, {mask}, {magic}, 0xEA; "
    out = "t" if scaled else "$0"
    if high_nibble:
        body += f"mov.b32 z, 0x2C002C00; mov.b32 y, 0xD480D480; {fma} {out}, t, z, y; "  # 1/16, -72
    elif asym:
        body += f"{sub} {out}, t, $3; "
    else:
        body += "mov.b32 z, " + ("0x43084308" if bf16 else "0x64086408") + f"; {sub} {out}, t, z; "  # base + 8
    if scaled:
        body += f"{mul} $0, t, {'$4' if asym else '$3'}; "
    return "{ .reg .b32 t, z, y; " + body + "}"


# Flat table: index 32 * scaled + 16 * bf16 + 8 * asym + j (Triton indexes constexpr tuples one level deep).
_PAIR_ASM = tl.constexpr(tuple(_pair_asm(j, bf, asym, sc) for sc in (False, True) for bf in (False, True)
                               for asym in (False, True) for j in range(8)))


@triton.jit
def _dequant_slice(words, zz, sc, J: tl.constexpr, ASYM: tl.constexpr, IS_BF16: tl.constexpr, USE_ASM: tl.constexpr):
    """Slice J of a words tile as weights (u - z) * s in x's dtype. zz: base + z (1024 + z for fp16, 128 + z
    for bf16) in x's dtype, read only when ASYM; sc: scales in x's dtype; both the shape of words."""
    if USE_ASM:
        if ASYM:
            w = tl.inline_asm_elementwise(_PAIR_ASM[32 + 16 * IS_BF16 + 8 + J], "=r,r,r,r,r", [words, zz, sc],
                                          dtype=sc.dtype, is_pure=True, pack=2)
        else:
            w = tl.inline_asm_elementwise(_PAIR_ASM[32 + 16 * IS_BF16 + J], "=r,r,r,r", [words, sc], dtype=sc.dtype,
                                          is_pure=True, pack=2)
    else:  # Triton's CPU interpreter runs no inline asm: the same values (one rounding, of the product)
        u = ((words >> (4 * J)) & 0xF).to(tl.float32)
        if ASYM:
            base = zz.to(tl.float32)
        elif IS_BF16:
            base = 136.0
        else:
            base = 1032.0
        if IS_BF16:
            w = ((u + 128.0 - base) * sc.to(tl.float32)).to(sc.dtype)
        else:
            w = ((u + 1024.0 - base) * sc.to(tl.float32)).to(sc.dtype)
    return w


@triton.jit
def _tc_x(x_rows, blk, J: tl.constexpr, r_c, K, m_mask, ok):
    """Activation slice J of a step: x^T rows k = blk * 128 + 16 J + r, as a (16 NB, BM) tile."""
    kk = blk * 128 + J * 16 + r_c
    return tl.load(x_rows + kk[:, None], mask=((kk < K) & ok)[:, None] & m_mask[None, :], other=0.0)


@triton.jit
def _tc_sz(s_ptr, z_ptr, blk, J: tl.constexpr, c_ok, K, N, offs_n, n_mask, GROUP: tl.constexpr, ASYM: tl.constexpr,
           IS_BF16: tl.constexpr, ok):
    """Scales (and base + zero points, when ASYM) of the group holding slice J, per column of the step."""
    k_first = blk * 128 + J * 16
    g_ok = n_mask[:, None] & (c_ok & (k_first < K) & ok)[None, :]
    g_off = (k_first // GROUP)[None, :] * N + offs_n[:, None]
    sc = tl.load(s_ptr + g_off, mask=g_ok, other=0.0)
    zz = sc  # unused unless ASYM
    if ASYM:
        zf = tl.load(z_ptr + g_off, mask=g_ok, other=0).to(tl.float32)
        zz = (zf + (128.0 if IS_BF16 else 1024.0)).to(sc.dtype)
    return sc, zz


@triton.jit
def _tc_slice(acc, words, zz, sc, xt, J: tl.constexpr, ASYM: tl.constexpr, IS_BF16: tl.constexpr, DOT_F32: tl.constexpr,
              USE_ASM: tl.constexpr):
    w = _dequant_slice(words, zz.to(xt.dtype), sc.to(xt.dtype), J, ASYM, IS_BF16, USE_ASM)
    if DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
        return tl.dot(w.to(tl.float32), xt.to(tl.float32), acc)
    return tl.dot(w, xt, acc)


@triton.jit
def _w4a16_tc_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16
    q_ptr,  # (N, Kp/8) int32
    s_ptr,  # (G, N)
    z_ptr,  # (G, N) uint8
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    KW,
    STEPS_PER_SPLIT,  # steps of NB blocks
    TOTAL_BLOCKS,
    S,
    # strides
    stride_xm,
    stride_om,
    # meta
    GROUP: tl.constexpr,
    ASYM: tl.constexpr,
    IS_BF16: tl.constexpr,
    DOT_F32: tl.constexpr,
    USE_ASM: tl.constexpr,
    BN: tl.constexpr,
    BM: tl.constexpr,
    NB: tl.constexpr,  # 128-blocks per step (one product of K = 16 * NB per slice)
    PREFETCH: tl.constexpr = False,  # load the next step's activation slices and scales a step ahead
    ROUND: tl.constexpr = 4,  # split-K partials summed per round (splitk_epilogue); 1 = the pre-session-12 tail
    PDL: tl.constexpr = 0,  # launched with programmatic dependent launch (config "pdl"): wait for the kernel before
                            # this one (griddepcontrol.wait) before the first read of x or of the split-K buffers
    PDL_LINES: tl.constexpr = 0,  # with PDL: 128-byte lines of each weight row's K chunk sent to L2 before that wait
    CHAIN: tl.constexpr = 0,  # let the next kernel (if launched with PDL) start: 1 at this program's start, 2 after
                              # its K loop (config "chain": 1 / "late")
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    offs_c = tl.arange(0, 16 * NB)  # column of the step's words tile: block c // 16, word c % 16
    blk_c = offs_c // 16
    r_c = offs_c % 16
    HALF: tl.constexpr = GROUP == 64

    s_start = pid_s * STEPS_PER_SPLIT
    if CHAIN == 1:
        gdc_launch_dependents()  # the next kernel may launch now; it waits for this whole grid before reading
    if PDL:
        # The weights and scales are never written by the kernel before this one (x, the output and the split-K
        # workspace / counters may be: they are touched only after the wait). Stream the first lines of this
        # program's weight rows into L2 meanwhile.
        if PDL_LINES > 0:
            pf_words = s_start * NB * 16 + tl.arange(0, PDL_LINES) * 32  # 32 int32 words per 128-byte line
            # clamped: never past the weight
            pf = q_ptr + tl.minimum(offs_n, N - 1)[:, None] * KW + tl.minimum(pf_words, KW - 1)[None, :]
            tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pf], dtype=tl.int32,
                                      is_pure=False, pack=1)
        gdc_wait()
    s_end = tl.minimum(s_start + STEPS_PER_SPLIT, tl.cdiv(TOTAL_BLOCKS, NB))
    q_rows = q_ptr + offs_n[:, None] * KW + offs_c[None, :]  # (BN, 16 NB)
    x_rows = x_ptr + offs_m[None, :] * stride_xm  # (1, BM)

    acc = tl.zeros([BN, BM], dtype=tl.float32)
    if PREFETCH:
        ok = s_start < s_end
        blk = s_start * NB + blk_c
        c_ok = blk < TOTAL_BLOCKS
        x0 = _tc_x(x_rows, blk, 0, r_c, K, m_mask, ok)
        x1 = _tc_x(x_rows, blk, 1, r_c, K, m_mask, ok)
        x2 = _tc_x(x_rows, blk, 2, r_c, K, m_mask, ok)
        x3 = _tc_x(x_rows, blk, 3, r_c, K, m_mask, ok)
        x4 = _tc_x(x_rows, blk, 4, r_c, K, m_mask, ok)
        x5 = _tc_x(x_rows, blk, 5, r_c, K, m_mask, ok)
        x6 = _tc_x(x_rows, blk, 6, r_c, K, m_mask, ok)
        x7 = _tc_x(x_rows, blk, 7, r_c, K, m_mask, ok)
        sc_lo, zz_lo = _tc_sz(s_ptr, z_ptr, blk, 0, c_ok, K, N, offs_n, n_mask, GROUP, ASYM, IS_BF16, ok)
        sc_hi, zz_hi = sc_lo, zz_lo
        if HALF:
            sc_hi, zz_hi = _tc_sz(s_ptr, z_ptr, blk, 4, c_ok, K, N, offs_n, n_mask, GROUP, ASYM, IS_BF16, ok)
        for st in range(s_start, s_end):
            blk = st * NB + blk_c
            c_ok = blk < TOTAL_BLOCKS
            words = tl.load(q_rows + st * NB * 16, mask=n_mask[:, None] & c_ok[None, :], other=0)
            ok = st + 1 < s_end
            nblk = blk + NB
            n_ok = nblk < TOTAL_BLOCKS
            y0 = _tc_x(x_rows, nblk, 0, r_c, K, m_mask, ok)
            y1 = _tc_x(x_rows, nblk, 1, r_c, K, m_mask, ok)
            y2 = _tc_x(x_rows, nblk, 2, r_c, K, m_mask, ok)
            y3 = _tc_x(x_rows, nblk, 3, r_c, K, m_mask, ok)
            y4 = _tc_x(x_rows, nblk, 4, r_c, K, m_mask, ok)
            y5 = _tc_x(x_rows, nblk, 5, r_c, K, m_mask, ok)
            y6 = _tc_x(x_rows, nblk, 6, r_c, K, m_mask, ok)
            y7 = _tc_x(x_rows, nblk, 7, r_c, K, m_mask, ok)
            tc_lo, tz_lo = _tc_sz(s_ptr, z_ptr, nblk, 0, n_ok, K, N, offs_n, n_mask, GROUP, ASYM, IS_BF16, ok)
            tc_hi, tz_hi = tc_lo, tz_lo
            if HALF:
                tc_hi, tz_hi = _tc_sz(s_ptr, z_ptr, nblk, 4, n_ok, K, N, offs_n, n_mask, GROUP, ASYM, IS_BF16, ok)
            acc = _tc_slice(acc, words, zz_lo, sc_lo, x0, 0, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_lo, sc_lo, x1, 1, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_lo, sc_lo, x2, 2, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_lo, sc_lo, x3, 3, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_hi, sc_hi, x4, 4, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_hi, sc_hi, x5, 5, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_hi, sc_hi, x6, 6, ASYM, IS_BF16, DOT_F32, USE_ASM)
            acc = _tc_slice(acc, words, zz_hi, sc_hi, x7, 7, ASYM, IS_BF16, DOT_F32, USE_ASM)
            x0, x1, x2, x3, x4, x5, x6, x7 = y0, y1, y2, y3, y4, y5, y6, y7
            sc_lo, zz_lo, sc_hi, zz_hi = tc_lo, tz_lo, tc_hi, tz_hi
    else:
        for st in range(s_start, s_end):
            blk = st * NB + blk_c  # (16 NB,) block of each column
            c_ok = blk < TOTAL_BLOCKS
            words = tl.load(q_rows + st * NB * 16, mask=n_mask[:, None] & c_ok[None, :], other=0)
            for j in tl.static_range(8):
                if (j * 16) % GROUP == 0:  # first slice of a group: that group's scales (and zero points)
                    sc, zz = _tc_sz(s_ptr, z_ptr, blk, j, c_ok, K, N, offs_n, n_mask, GROUP, ASYM, IS_BF16, True)
                xt = _tc_x(x_rows, blk, j, r_c, K, m_mask, True)
                acc = _tc_slice(acc, words, zz, sc, xt, j, ASYM, IS_BF16, DOT_F32, USE_ASM)
    if CHAIN == 2:
        gdc_launch_dependents()  # every weight byte is read; only the split-K epilogue is left

    ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    local = tl.arange(0, BN)[:, None] * BM + tl.arange(0, BM)[None, :]
    splitk_epilogue(acc, ptrs, n_mask[:, None] & m_mask[None, :], ws_ptr, lock_ptr, local,
                    pid_m * tl.num_programs(0) + pid_n, pid_s, S, BN * BM, ROUND)


@triton.jit
def _tcx_slice(part, acc, words, zz, scale, xa, J: tl.constexpr, GROUP: tl.constexpr, ASYM: tl.constexpr,
               IS_BF16: tl.constexpr, DOT_F32: tl.constexpr, USE_ASM: tl.constexpr):
    """Slice J of a block: dequantize (16, BN) weights, one (BM, 16) @ (16, BN) product; at a group's end,
    scale its partial sums into acc."""
    xdt = xa.dtype
    if USE_ASM:
        if ASYM:
            w = tl.inline_asm_elementwise(_PAIR_ASM[16 * IS_BF16 + 8 + J], "=r,r,r,r", [words, tl.broadcast_to(zz, words.shape)],
                                          dtype=xdt, is_pure=True, pack=2)
        else:
            w = tl.inline_asm_elementwise(_PAIR_ASM[16 * IS_BF16 + J], "=r,r,r", [words], dtype=xdt, is_pure=True, pack=2)
    else:  # CPU interpreter: the same exact values from plain ops
        w = (((words >> (4 * J)) & 0xF).to(tl.float32) - (zz.to(tl.float32) - (128.0 if IS_BF16 else 1024.0))).to(xdt)
    if DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
        part = tl.dot(xa.to(tl.float32), w.to(tl.float32), part)
    else:
        part = tl.dot(xa, w, part)  # (BM, 16) @ (16, BN)
    if ((J + 1) * 16) % GROUP == 0:  # group complete: scale its partial sums once
        acc += part * scale[None, :]
        part = tl.zeros_like(part)
    return part, acc


@triton.jit
def _w4a16_tcx_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16
    q_ptr,  # (N, Kp/8) int32
    s_ptr,  # (G, N)
    z_ptr,  # (G, N) uint8
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    KW,
    BLOCKS_PER_SPLIT,
    TOTAL_BLOCKS,
    S,
    # strides
    stride_xm,
    stride_om,
    # meta
    GROUP: tl.constexpr,
    ASYM: tl.constexpr,
    IS_BF16: tl.constexpr,
    DOT_F32: tl.constexpr,
    USE_ASM: tl.constexpr,
    EVEN: tl.constexpr,  # K % 128 == 0 and N % BN == 0: no masks on weights or activations along K
    BN: tl.constexpr,
    BM: tl.constexpr,
):
    """Activations on the left of the tensor-core product (out = x @ W^T, tiles (BM, 16) @ (16, BN)): the
    weights' words move into the right-operand register layout once per 128-block (one shared-memory pass
    for 8 slices) and are dequantized there, two per asm block; mma.sync, so warps never wait on each other
    inside a slice. The next block's 8 activation slices, scales and zero points are loaded at the top of
    each iteration (software prefetch): the first measurement, loading them where they were used, stalled
    on one global round trip per slice (loads of 2 bytes a thread are not pipelined by Triton)."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M
    offs_r = tl.arange(0, 16)
    xdt = x_ptr.dtype.element_ty
    HALF: tl.constexpr = GROUP == 64  # second group of a block starts at slice 4

    b_start = pid_s * BLOCKS_PER_SPLIT
    b_end = tl.minimum(b_start + BLOCKS_PER_SPLIT, TOTAL_BLOCKS)
    q_rows = q_ptr + offs_n[:, None] * KW + offs_r[None, :]  # (BN, 16): 16-byte vector loads along a row
    x_rows = x_ptr + offs_m[:, None] * stride_xm + offs_r[None, :]  # (BM, 16)
    s_cols = s_ptr + offs_n
    z_cols = z_ptr + offs_n
    base = 128.0 if IS_BF16 else 1024.0

    # Prefetch of block b_start (masked off when this split is empty).
    ok = b_start < b_end
    k0 = b_start * 128
    xm = m_mask[:, None] & ok
    if EVEN:
        x0 = tl.load(x_rows + k0, mask=xm, other=0.0)
        x1 = tl.load(x_rows + k0 + 16, mask=xm, other=0.0)
        x2 = tl.load(x_rows + k0 + 32, mask=xm, other=0.0)
        x3 = tl.load(x_rows + k0 + 48, mask=xm, other=0.0)
        x4 = tl.load(x_rows + k0 + 64, mask=xm, other=0.0)
        x5 = tl.load(x_rows + k0 + 80, mask=xm, other=0.0)
        x6 = tl.load(x_rows + k0 + 96, mask=xm, other=0.0)
        x7 = tl.load(x_rows + k0 + 112, mask=xm, other=0.0)
    else:
        x0 = tl.load(x_rows + k0, mask=xm & ((k0 + offs_r) < K)[None, :], other=0.0)
        x1 = tl.load(x_rows + k0 + 16, mask=xm & ((k0 + 16 + offs_r) < K)[None, :], other=0.0)
        x2 = tl.load(x_rows + k0 + 32, mask=xm & ((k0 + 32 + offs_r) < K)[None, :], other=0.0)
        x3 = tl.load(x_rows + k0 + 48, mask=xm & ((k0 + 48 + offs_r) < K)[None, :], other=0.0)
        x4 = tl.load(x_rows + k0 + 64, mask=xm & ((k0 + 64 + offs_r) < K)[None, :], other=0.0)
        x5 = tl.load(x_rows + k0 + 80, mask=xm & ((k0 + 80 + offs_r) < K)[None, :], other=0.0)
        x6 = tl.load(x_rows + k0 + 96, mask=xm & ((k0 + 96 + offs_r) < K)[None, :], other=0.0)
        x7 = tl.load(x_rows + k0 + 112, mask=xm & ((k0 + 112 + offs_r) < K)[None, :], other=0.0)
    sm = n_mask & ok
    s_lo = tl.load(s_cols + (k0 // GROUP) * N, mask=sm & (k0 < K), other=0.0).to(tl.float32)
    z_lo = tl.load(z_cols + (k0 // GROUP) * N, mask=sm & (k0 < K), other=0) if ASYM else s_lo
    s_hi = s_lo
    z_hi = z_lo
    if HALF:
        s_hi = tl.load(s_cols + (k0 // GROUP + 1) * N, mask=sm & (k0 + 64 < K), other=0.0).to(tl.float32)
        if ASYM:
            z_hi = tl.load(z_cols + (k0 // GROUP + 1) * N, mask=sm & (k0 + 64 < K), other=0)

    acc = tl.zeros([BM, BN], dtype=tl.float32)
    part = tl.zeros([BM, BN], dtype=tl.float32)
    for b in range(b_start, b_end):
        if EVEN:
            words = tl.trans(tl.load(q_rows + b * 16))  # (16, BN)
        else:
            words = tl.trans(tl.load(q_rows + b * 16, mask=n_mask[:, None], other=0))
        # Next block's activations / scales / zero points: in flight while this block computes.
        ok = b + 1 < b_end
        k1 = (b + 1) * 128
        xm = m_mask[:, None] & ok
        if EVEN:
            y0 = tl.load(x_rows + k1, mask=xm, other=0.0)
            y1 = tl.load(x_rows + k1 + 16, mask=xm, other=0.0)
            y2 = tl.load(x_rows + k1 + 32, mask=xm, other=0.0)
            y3 = tl.load(x_rows + k1 + 48, mask=xm, other=0.0)
            y4 = tl.load(x_rows + k1 + 64, mask=xm, other=0.0)
            y5 = tl.load(x_rows + k1 + 80, mask=xm, other=0.0)
            y6 = tl.load(x_rows + k1 + 96, mask=xm, other=0.0)
            y7 = tl.load(x_rows + k1 + 112, mask=xm, other=0.0)
        else:
            y0 = tl.load(x_rows + k1, mask=xm & ((k1 + offs_r) < K)[None, :], other=0.0)
            y1 = tl.load(x_rows + k1 + 16, mask=xm & ((k1 + 16 + offs_r) < K)[None, :], other=0.0)
            y2 = tl.load(x_rows + k1 + 32, mask=xm & ((k1 + 32 + offs_r) < K)[None, :], other=0.0)
            y3 = tl.load(x_rows + k1 + 48, mask=xm & ((k1 + 48 + offs_r) < K)[None, :], other=0.0)
            y4 = tl.load(x_rows + k1 + 64, mask=xm & ((k1 + 64 + offs_r) < K)[None, :], other=0.0)
            y5 = tl.load(x_rows + k1 + 80, mask=xm & ((k1 + 80 + offs_r) < K)[None, :], other=0.0)
            y6 = tl.load(x_rows + k1 + 96, mask=xm & ((k1 + 96 + offs_r) < K)[None, :], other=0.0)
            y7 = tl.load(x_rows + k1 + 112, mask=xm & ((k1 + 112 + offs_r) < K)[None, :], other=0.0)
        sm = n_mask & ok
        t_lo = tl.load(s_cols + (k1 // GROUP) * N, mask=sm & (k1 < K), other=0.0).to(tl.float32)
        u_lo = tl.load(z_cols + (k1 // GROUP) * N, mask=sm & (k1 < K), other=0) if ASYM else t_lo
        t_hi = t_lo
        u_hi = u_lo
        if HALF:
            t_hi = tl.load(s_cols + (k1 // GROUP + 1) * N, mask=sm & (k1 + 64 < K), other=0.0).to(tl.float32)
            if ASYM:
                u_hi = tl.load(z_cols + (k1 // GROUP + 1) * N, mask=sm & (k1 + 64 < K), other=0)

        if ASYM:
            zz_lo = (z_lo.to(tl.float32) + base).to(xdt)[None, :]
            zz_hi = (z_hi.to(tl.float32) + base).to(xdt)[None, :]
        else:
            zz_lo = (tl.zeros([1, BN], dtype=tl.float32) + (base + 8.0)).to(xdt)
            zz_hi = zz_lo
        part, acc = _tcx_slice(part, acc, words, zz_lo, s_lo, x0, 0, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_lo, s_lo, x1, 1, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_lo, s_lo, x2, 2, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_lo, s_lo, x3, 3, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_hi, s_hi, x4, 4, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_hi, s_hi, x5, 5, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_hi, s_hi, x6, 6, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        part, acc = _tcx_slice(part, acc, words, zz_hi, s_hi, x7, 7, GROUP, ASYM, IS_BF16, DOT_F32, USE_ASM)
        x0, x1, x2, x3, x4, x5, x6, x7 = y0, y1, y2, y3, y4, y5, y6, y7
        s_lo, s_hi, z_lo, z_hi = t_lo, t_hi, u_lo, u_hi

    ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    splitk_epilogue(acc, ptrs, m_mask[:, None] & n_mask[None, :], ws_ptr, lock_ptr, local,
                    pid_m * tl.num_programs(0) + pid_n, pid_s, S, BN * BM)


@triton.jit
def _w4a16_dequant_kernel(q_ptr, s_ptr, z_ptr, w_ptr, N, K, KW, GROUP: tl.constexpr, ASYM: tl.constexpr, BN: tl.constexpr):
    """W (N, K) in the scales' dtype from the packed layout: one (BN, 128) block per program. Used for large
    M, where one dequantization pass plus the dense cuBLAS GEMM beats dequantizing inside every M-tile."""
    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)
    b = tl.program_id(1)
    n_mask = offs_n < N
    offs_r = tl.arange(0, 16)
    words = tl.load(q_ptr + offs_n[:, None] * KW + b * 16 + offs_r[None, :], mask=n_mask[:, None], other=0)
    for j in tl.static_range(8):
        k = b * 128 + j * 16 + offs_r  # (16,)
        g = (b * 128 + j * 16) // GROUP
        ok = n_mask & (b * 128 + j * 16 < K)
        scale = tl.load(s_ptr + g * N + offs_n, mask=ok, other=0.0).to(tl.float32)
        if ASYM:
            zero = tl.load(z_ptr + g * N + offs_n, mask=ok, other=0).to(tl.float32)
        else:
            zero = tl.zeros([BN], dtype=tl.float32) + 8.0
        w = (((words >> (4 * j)) & 0xF).to(tl.float32) - zero[:, None]) * scale[:, None]
        tl.store(w_ptr + offs_n[:, None] * K + k[None, :], w.to(w_ptr.dtype.element_ty), mask=n_mask[:, None] & (k < K)[None, :])


@on_input_device
def dequantize_w4a16(qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int, k: int) -> torch.Tensor:
    """(N, K) weight in the scales' dtype (each value rounded once from the exact fp32 (u - z) * s)."""
    n = qweight.shape[0]
    w = torch.empty(n, k, device=qweight.device, dtype=scales.dtype)
    bn = 64
    _w4a16_dequant_kernel[(triton.cdiv(n, bn), padded_k(k) // BLOCK_K)](
        qweight, scales, zeros if zeros is not None else scales, w, n, k, qweight.shape[1], GROUP=group_size,
        ASYM=zeros is not None, BN=bn, num_warps=4)
    return w


def _check(x, qweight, scales, zeros, group_size):
    what = "w4a16_linear"
    check_device(what, x, qweight, scales, zeros)
    if group_size not in GROUP_SIZES:
        raise CompressError(f"{what}: group_size={group_size} is not supported; use one of {GROUP_SIZES}")
    k = x.shape[-1]
    if qweight.dtype != torch.int32 or qweight.dim() != 2 or qweight.shape[1] * 8 != padded_k(k):
        raise CompressError(
            f"{what}: qweight {tuple(qweight.shape)} {qweight.dtype} does not fit in_features={k}; "
            f"expected int32 (N, {padded_k(k) // 8}) from compress.packing.int4.pack_int4"
        )
    n = qweight.shape[0]
    g = num_groups(k, group_size)
    if tuple(scales.shape) != (g, n):
        raise CompressError(f"{what}: scales {tuple(scales.shape)} do not match; expected (G, N) = {(g, n)} for group_size={group_size}")
    if zeros is not None and (tuple(zeros.shape) != (g, n) or zeros.dtype != torch.uint8):
        raise CompressError(f"{what}: zeros {tuple(zeros.shape)} {zeros.dtype} do not match; expected uint8 {(g, n)}")
    return n, k


def _tc(bm: int, bn: int, nb: int, warps: int, stages: int, waves: float | None = None, fill: float | None = None) -> dict:
    """A tensor-core tile config. waves: split K until ~waves programs per SM (plan_split_k, rounding up); fill:
    the largest split within fill programs per SM (plan_split_fill, rounding down)."""
    cfg = {"kind": "tc", "BM": bm, "BN": bn, "NB": nb, "num_warps": warps, "num_stages": stages}
    return cfg | ({"waves": waves} if waves else {}) | ({"fill": fill} if fill else {})


# Per layer shape (N, K) and M bucket (16: M = 2..16, 32: 17..32, 64: 33..64, 256: 65..256), from session 12's
# H100 sweeps of tiles x every split count (bench/results/h100/kernels_s12/README.md; picks.json of calls 4, 8, 12):
# the fastest config of each row where it beat the launcher's previous choice by > 2%, its split written as the fill
# rule that gives it on 132 SMs. What they found: wide N tiles (256) on the large layers, 32-token tiles read twice at
# 64 tokens on k/v, and one wave of programs (the session-8 entries split K to ~2 waves and paid a second, ragged one).
# Bucket 256 replaces dequantize + cuBLAS on the three layers where the tiles beat it at M = 256 (call 12: 8B q/o
# 37.1 -> 31.8 us, 8B gate/up 118.5 -> 76.2, 70B down 456 -> 267; fp16 18.7 / 53.1 / 197); on k/v they did not, and
# the other shapes were not timed there. Shapes and buckets not listed take the M table below (8B down at M = 16: no
# candidate beat it).
SHAPE_TUNED: dict[tuple[int, int], dict[int, dict]] = {
    (4096, 4096): {16: _tc(16, 128, 2, 8, 3, fill=1.0), 32: _tc(32, 128, 2, 8, 3, fill=1.0),
                   64: _tc(64, 128, 2, 8, 3, fill=1.0), 256: _tc(64, 256, 1, 8, 3, fill=1.0)},  # 8B q / o
    (1024, 4096): {16: _tc(16, 64, 2, 4, 4, fill=1.0), 32: _tc(32, 64, 2, 4, 3, fill=1.0),
                   64: _tc(32, 64, 2, 4, 4, fill=1.0)},  # 8B k / v
    (14336, 4096): {16: _tc(16, 256, 2, 8, 3, fill=1.0), 32: _tc(32, 256, 2, 8, 3, fill=1.0),
                    64: _tc(64, 256, 1, 8, 3, fill=1.0), 256: _tc(128, 256, 1, 8, 3, fill=1.0)},  # 8B gate / up
    (4096, 14336): {32: _tc(32, 128, 2, 8, 3, fill=1.0), 64: _tc(64, 128, 2, 8, 3, fill=1.0)},  # 8B down
    (8192, 8192): {16: _tc(16, 128, 2, 8, 3, fill=2.0), 32: _tc(32, 256, 2, 8, 3, fill=1.0),
                   64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # 70B q / o
    (1024, 8192): {16: _tc(16, 64, 4, 4, 3, fill=1.0), 32: _tc(32, 64, 2, 4, 3, fill=1.0),
                   64: _tc(32, 64, 2, 4, 3, fill=2.0)},  # 70B k / v
    (28672, 8192): {16: _tc(16, 256, 2, 8, 3, fill=1.0), 32: _tc(32, 256, 2, 8, 3, fill=2.0),
                    64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # 70B gate / up
    (8192, 28672): {16: _tc(16, 256, 2, 8, 3, fill=1.0), 32: _tc(32, 256, 2, 8, 3, fill=1.0),
                    64: _tc(64, 256, 1, 8, 3, fill=1.0), 256: _tc(128, 256, 1, 8, 3, fill=1.0)},  # 70B down
    # The layers the runtime fuses (compress.runtime.fuse: q/k/v and gate/up concatenated) and Qwen3-8B's down (call 8).
    (6144, 4096): {16: _tc(16, 128, 4, 8, 3, fill=1.0)},  # Llama-3-8B / Qwen3-8B q/k/v
    (28672, 4096): {16: _tc(16, 256, 2, 8, 3, fill=1.0), 64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # 8B gate/up
    (24576, 4096): {16: _tc(16, 64, 2, 4, 4, fill=1.0), 64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # Qwen3-8B gate/up
    (4096, 12288): {64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # Qwen3-8B down
    (10240, 8192): {16: _tc(16, 128, 2, 8, 3, fill=2.0), 32: _tc(32, 256, 2, 8, 3, fill=1.0),
                    64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # 70B q/k/v
    (57344, 8192): {16: _tc(16, 256, 2, 8, 3, fill=1.0), 32: _tc(32, 256, 1, 8, 3, fill=1.0),
                    64: _tc(64, 256, 1, 8, 3, fill=1.0)},  # 70B gate/up
}


# Session 13 (bench/results/h100/kernels_s13/README.md): above 32 tokens the tensor-core tiles launch with programmatic
# dependent launch and wait for the kernel before it ("pdl": 0: no prefetch, no early trigger of the next kernel).
# - Kernel table (call 2, same process, the 8 Llama-3 shapes, each call after the previous call of the same kernel):
#   faster on all 24 rows at 16 / 32 / 64 tokens (0.5-8.8%). Sending the first 2 KB of each weight row to L2 before the
#   wait, or letting the next kernel start early ("chain"), was slower on most rows.
# - End to end (calls 5-6, synthetic Llama-3-8B W4A16 decode, arms in turn in one process), every tile under PDL:
#   batch 64 gained (TPOT 5.90 -> 5.75-5.84 ms) but batch 32 lost 1-3% in both calls (4.54 -> 4.59-4.66 ms) and batch 8
#   4% in one (3.19 -> 3.30-3.32 ms). In the decode step the kernel before a tile lets it launch at once (those kernels
#   trigger early), so the tile's programs are placed on the SMs while that kernel still holds some of them (a reading,
#   not profiled). So only the tiles above 32 tokens launch this way: call 6, batch 64 5.90 -> 5.75 ms, batch 8 and
#   32 as before.
TILE_LAUNCH = {"pdl": 0}
TILE_LAUNCH_MIN_M = 33


def _config(m: int, n: int, k: int | None = None) -> dict:
    """Kernel and tiles by M, and by layer shape where SHAPE_TUNED lists it (COMPRESS_KERNEL_CONFIGS overrides both),
    tensor-core tiles from TILE_LAUNCH_MIN_M tokens launched as TILE_LAUNCH says. The M table is the H100 sweep of
    2026-11-22 (bench/results/h100/kernels/tuned.json, NOTES.md) with session 12's one-wave split at 17..64 tokens."""
    tuned = tuned_config("w4a16", m)
    if tuned:
        return tuned
    cfg = _tile_config(m, n, k)
    return cfg | TILE_LAUNCH if cfg["kind"] == "tc" and m >= TILE_LAUNCH_MIN_M else cfg


def _tile_config(m: int, n: int, k: int | None) -> dict:
    if k is not None and 1 < m <= 256:
        got = SHAPE_TUNED.get((n, k), {}).get(16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else 256)))
        if got:
            return dict(got)
    if m == 1:
        return {"kind": "tc", "BM": 16, "BN": 64, "num_warps": 4, "num_stages": 2, "NB": 4}
    if m <= 16:
        return {"kind": "tc", "BM": 16, "BN": 128, "num_warps": 8, "num_stages": 3, "NB": 2}
    if m <= 32:  # session 12 (call 4): with these tiles one wave (fill 1) was as fast or faster than ~2 waves
        return _tc(32, 128, 2, 8, 3, fill=1.0)
    if m <= 64:
        return _tc(64, 128, 2, 8, 3, fill=1.0)
    return {"kind": "dequant"}


def _split(cfg: dict, tiles: int, steps: int, device: torch.device) -> tuple[int, int]:
    """(splits, steps per split) of a K loop of `steps` over `tiles` output tiles: the config's explicit "split", else
    its "fill" (plan_split_fill), else its "waves" (plan_split_k, default 2); even chunks, none empty."""
    split = cfg.get("split") or (plan_split_fill(tiles, steps, device, cfg["fill"]) if "fill" in cfg
                                 else plan_split_k(tiles, steps, device, cfg.get("waves", 2.0)))
    per = triton.cdiv(steps, split)
    return triton.cdiv(steps, per), per


def _pdl(cfg: dict, chunk_bytes: int, device: torch.device) -> tuple[int, int, int]:
    """(PDL, CHAIN, PDL_LINES) of the tc kernel from config keys "pdl" (bytes of each weight row's K chunk to send to L2
    before the dependency wait; 0 = wait only; absent = a plain launch) and "chain" (1 / "late": the kernel after this
    one may launch early, if it was launched with PDL). Only where `pdl_enabled` (Hopper on, not in Triton's CPU
    interpreter; COMPRESS_DECODE_PDL=0 turns it off)."""
    if not pdl_enabled(device):
        return 0, 0, 0
    chain = config_chain(cfg)
    if "pdl" not in cfg:
        return 0, chain, 0
    want = min(int(cfg["pdl"]), chunk_bytes)
    return 1, chain, (pow2_floor(want) // 128 if want > 0 else 0)


def _launch(x, qweight, scales, zeros, group_size: int, config: dict | None = None) -> torch.Tensor:
    n, k = _check(x, qweight, scales, zeros, group_size)
    lead = x.shape[:-1]
    x2 = check_activation("w4a16_linear", x, k)
    m = x2.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0:
        return out.reshape(*lead, n)
    cfg = dict(config or _config(m, n, k))
    if cfg["kind"] == "dequant":  # large M: one dequantization pass, then cuBLAS
        w = dequantize_w4a16(qweight, scales.to(x.dtype), zeros, group_size, k)
        return torch.nn.functional.linear(x2, w).reshape(*lead, n)
    total_blocks = padded_k(k) // BLOCK_K
    n_tiles = triton.cdiv(n, cfg["BN"])
    m_tiles = m if cfg["kind"] == "gemv" else triton.cdiv(m, cfg["BM"])
    nb = cfg.get("NB", 1) if cfg["kind"] == "tc" else 1  # the tc kernel's K loop steps NB blocks at a time
    split, per = _split(cfg, n_tiles * m_tiles, triton.cdiv(total_blocks, nb), x.device)
    zeros_arg = zeros if zeros is not None else scales  # never read when ASYM is False
    common = dict(GROUP=group_size, ASYM=zeros is not None, BN=cfg["BN"], num_warps=cfg["num_warps"])
    if cfg["kind"] == "gemv":
        ws, locks = splitk_buffers(x.device, n_tiles * m, split, cfg["BN"])
        _w4a16_gemv_kernel[(n_tiles, split, m)](
            x2, qweight, scales, zeros_arg, out, ws, locks, m, n, k, qweight.shape[1], per, total_blocks, split,
            x2.stride(0), n, EVEN_K=k % BLOCK_K == 0, EVEN_N=n % cfg["BN"] == 0, **common)
    elif cfg["kind"] == "tc":
        ws, locks = splitk_buffers(x.device, n_tiles * m_tiles, split, cfg["BN"] * cfg["BM"])
        pdl, chain, lines = _pdl(cfg, per * nb * BLOCK_K // 2, x.device)
        _w4a16_tc_kernel[(n_tiles, m_tiles, split)](
            x2, qweight, scales, zeros_arg, out, ws, locks, m, n, k, qweight.shape[1], per, total_blocks, split,
            x2.stride(0), n, GROUP=group_size, ASYM=zeros is not None, IS_BF16=x.dtype == torch.bfloat16,
            DOT_F32=interpreter_dot_f32(x.dtype), USE_ASM=not interpreting(), BN=cfg["BN"], BM=cfg["BM"], NB=nb, num_warps=cfg["num_warps"],
            num_stages=cfg.get("num_stages", 1), ROUND=cfg.get("round", 4), PDL=pdl, PDL_LINES=lines, CHAIN=chain,
            **({"launch_pdl": True} if pdl else {}))
    elif cfg["kind"] == "tcx":
        ws, locks = splitk_buffers(x.device, n_tiles * m_tiles, split, cfg["BN"] * cfg["BM"])
        _w4a16_tcx_kernel[(n_tiles, m_tiles, split)](
            x2, qweight, scales, zeros_arg, out, ws, locks, m, n, k, qweight.shape[1], per, total_blocks, split,
            x2.stride(0), n, IS_BF16=x.dtype == torch.bfloat16, DOT_F32=interpreter_dot_f32(x.dtype),
            USE_ASM=not interpreting(), EVEN=k % BLOCK_K == 0 and n % cfg["BN"] == 0, BM=cfg["BM"],
            num_stages=cfg.get("num_stages", 1), **common)
    else:
        ws, locks = splitk_buffers(x.device, n_tiles * m_tiles, split, cfg["BN"] * cfg["BM"])
        _w4a16_mma_kernel[(n_tiles, m_tiles, split)](
            x2, qweight, scales, zeros_arg, out, ws, locks, m, n, k, qweight.shape[1], per, total_blocks, split,
            x2.stride(0), n, IS_BF16=x.dtype == torch.bfloat16, DOT_F32=interpreter_dot_f32(x.dtype), BM=cfg["BM"],
            num_stages=cfg.get("num_stages", 2), **common)
    return out.reshape(*lead, n)


def _w4a16_op_impl(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int) -> torch.Tensor:
    return _launch(x, qweight, scales, zeros, group_size)


_w4a16_op = torch.library.custom_op("compress::w4a16_linear", _w4a16_op_impl, mutates_args=())


@_w4a16_op.register_fake
def _(x, qweight, scales, zeros, group_size):
    return x.new_empty(*x.shape[:-1], qweight.shape[0])


@on_input_device
def w4a16_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                 group_size: int = 128, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias) with W in compress.int4 layout.

    x (..., K) fp16/bf16; qweight int32 (N, Kp/8); scales (G, N); zeros uint8 (G, N) or None
    (symmetric, z = 8). Returns (..., N) in x's dtype.
    """
    op = _w4a16_op_impl if direct_call(x, qweight, scales, zeros) else torch.ops.compress.w4a16_linear
    y = op(x, qweight, scales, zeros, group_size)
    return y + bias if bias is not None else y


def w4a16_linear_ref(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                     group_size: int = 128, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Plain-torch reference: unpack, dequantize in fp32, matmul in fp32, cast to x's dtype."""
    k = x.shape[-1]
    w = dequantize_int4(unpack_int4(qweight, k), scales, zeros, group_size)  # (N, K) fp32
    y = x.float() @ w.t()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
