"""VPTQ (compress.vptq v1) linear layers: fused decode GEMV, and dequantize + GEMM for larger M.

Math (contract: /work/notes/VPTQ_FORMAT.md, reference decoder compress/vptq/format.py): with vector
length v, vectors run down the output dimension, one input column j at a time, so for n = g*v + i
    y[m, n] = s[n] * sum_j x[m, j] * (C[idx[j, g], i] + R[ridx[j, g], i]) + t[n] * sum_j x[m, j].
Batch 1 (decode) with v = 8, fp16 codebooks of 4096/8192 centroids and 0/256/512 residual centroids
runs a CUDA C++ kernel built with nvcc on first use: kernels/vptq_cuda.py (split-K through a workspace,
codebooks in shared memory) or kernels/vptq_cluster.py (split-K inside a thread-block cluster, codebooks in
shared memory or through L1), whichever kernels/vptq_select.py measured faster for the layer's shape. Everything else up to GEMV_MAX_M tokens runs the Triton GEMV
here: it accumulates the bracket for a (BJ columns x BG vectors x v) tile and applies scale and bias
once at the end; its v-wide codebook rows are 16-byte gathers through L1. Both read the packed bit
stream of the checkpoint as is (b bits per index, little-endian, may straddle two 32-bit words): no
re-layout at load time.

Outlier columns (optional): their rows of the main indices are ignored; the launcher zeroes those
activations for the main pass and adds a second pass over the outlier codebook with the gathered
activations (the sum is exact in the math above).

A few-token kernel (`vptq_gemm`, up to GEMM_MAX_M tokens, no outlier columns) decodes each weight tile once
and multiplies it with all tokens' rows on the tensor cores; the runtime times it against `vptq_linear`. On a GPU
the CUDA C++ version (kernels/vptq_gemm_cuda.py: codebooks in shared memory) serves the calls it covers, the
Triton kernel here the rest (and the CPU interpreter).

Public: `vptq_linear`, `vptq_gemm`, `vptq_dequantize` (custom ops compress::vptq_linear / compress::vptq_gemm /
compress::vptq_dequantize), `vptq_linear_ref` (plain torch, written from the contract).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from compress.errors import CompressError
from kernels import vptq_cluster, vptq_cuda, vptq_gemm_cuda, vptq_select
from kernels._common import (check_activation, check_device, interpreter_dot_f32, plan_split_k, splitk_buffers,
                             splitk_epilogue)
from kernels.op_dispatch import direct_call, on_input_device

# Decode GEMV up to this many tokens; above, dequantize once and use the dense GEMM.
GEMV_MAX_M = 4


def index_words(count: int, bits: int) -> int:
    return (count * bits + 31) // 32


@triton.jit
def _read_indices(idx_ptr, offs_j, word, shift, IW, mask, B: tl.constexpr):
    """(BJ, BG) indices: bits [g*B, g*B + B) of row j's little-endian bit stream."""
    row = idx_ptr + offs_j[:, None] * IW
    w0 = tl.load(row + word[None, :], mask=mask, other=0).to(tl.uint32, bitcast=True)
    if 32 % B != 0:  # an index may straddle two words
        w1 = tl.load(row + word[None, :] + 1, mask=mask & ((word + 1) < IW)[None, :], other=0).to(tl.uint32, bitcast=True)
        # (w1 << 1) << (31 - shift) == w1 << (32 - shift) without the undefined shift by 32.
        val = (w0 >> shift[None, :]) | ((w1 << 1) << (31 - shift)[None, :])
    else:
        val = w0 >> shift[None, :]
    return (val & ((1 << B) - 1)).to(tl.int32)


@triton.jit
def _decode_tile(idx_ptr, cb_ptr, ridx_ptr, rcb_ptr, offs_j, offs_g, offs_i, mask, IW, RW,
                 B: tl.constexpr, RB: tl.constexpr, V: tl.constexpr, HAS_RES: tl.constexpr):
    """(BJ, BG, V) fp32 codebook vectors (main + residual) of columns offs_j, vector slots offs_g."""
    bit = offs_g * B
    idx = _read_indices(idx_ptr, offs_j, bit >> 5, (bit & 31).to(tl.uint32), IW, mask, B)
    vec = tl.load(cb_ptr + idx[:, :, None] * V + offs_i[None, None, :]).to(tl.float32)
    if HAS_RES:
        rbit = offs_g * RB
        ridx = _read_indices(ridx_ptr, offs_j, rbit >> 5, (rbit & 31).to(tl.uint32), RW, mask, RB)
        vec += tl.load(rcb_ptr + ridx[:, :, None] * V + offs_i[None, None, :]).to(tl.float32)
    return vec


@triton.jit
def _vptq_gemv_kernel(
    # tensors
    x_ptr,  # (M, K) fp16/bf16
    idx_ptr,  # (K, IW) int32 packed main indices
    cb_ptr,  # (k, V) fp16 main codebook
    ridx_ptr,  # (K, RW) int32 packed residual indices (HAS_RES)
    rcb_ptr,  # (kr, V) fp16 residual codebook (HAS_RES)
    s_ptr,  # (N,) scale (HAS_SCALE)
    t_ptr,  # (N,) bias (HAS_BIAS)
    out_ptr,  # (M, N)
    ws_ptr,  # split-K workspace (fp32)
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    K,
    NG,  # N / V vector slots
    IW,
    RW,
    J_PER_SPLIT,  # multiple of BJ
    S,
    # strides
    stride_xm,
    stride_om,
    # meta
    B: tl.constexpr,
    RB: tl.constexpr,
    V: tl.constexpr,
    HAS_RES: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BG: tl.constexpr,
    BJ: tl.constexpr,
):
    pid_g = tl.program_id(0)
    pid_s = tl.program_id(1)
    m = tl.program_id(2)
    offs_g = pid_g * BG + tl.arange(0, BG)
    g_mask = offs_g < NG
    offs_i = tl.arange(0, V)

    acc = tl.zeros([BJ, BG, V], dtype=tl.float32)
    xsum = tl.zeros([BJ], dtype=tl.float32)
    j_start = pid_s * J_PER_SPLIT
    for jj in range(0, J_PER_SPLIT, BJ):
        offs_j = j_start + jj + tl.arange(0, BJ)
        j_mask = offs_j < K
        xj = tl.load(x_ptr + m * stride_xm + offs_j, mask=j_mask, other=0.0).to(tl.float32)
        vec = _decode_tile(idx_ptr, cb_ptr, ridx_ptr, rcb_ptr, offs_j, offs_g, offs_i, j_mask[:, None] & g_mask[None, :],
                           IW, RW, B, RB, V, HAS_RES)
        acc += vec * xj[:, None, None]
        xsum += xj

    y = tl.sum(acc, axis=0)  # (BG, V)
    offs_n = offs_g[:, None] * V + offs_i[None, :]
    n_mask = g_mask[:, None]
    if HAS_SCALE:
        y = y * tl.load(s_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(t_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32) * tl.sum(xsum, axis=0)
    local = tl.arange(0, BG)[:, None] * V + offs_i[None, :]
    splitk_epilogue(y, out_ptr + m * stride_om + offs_n, n_mask & (offs_i < V)[None, :], ws_ptr, lock_ptr, local,
                    m * tl.num_programs(0) + pid_g, pid_s, S, BG * V)


@triton.jit
def _vptq_gemm_kernel(
    x_ptr, idx_ptr, cb_ptr, ridx_ptr, rcb_ptr, s_ptr, t_ptr, out_ptr, ws_ptr, lock_ptr,
    M, K, NG, IW, RW, J_PER_SPLIT, S, stride_xm, stride_om,
    B: tl.constexpr, RB: tl.constexpr, V: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
    BM: tl.constexpr, BG: tl.constexpr, BJ: tl.constexpr, DOT_F32: tl.constexpr,
):
    """Few-token VPTQ: y (M, N) for up to BM rows a program, each weight tile decoded once for all of them.

    The GEMV decodes a (BJ x BG*V) tile of W^T per token; dequantize + GEMM writes and re-reads the whole fp16
    weight every call (VPTQ at 8-64 tokens ran 24-25 ms a Llama-3-8B decode step that way, session 20). Here a
    program decodes the tile into registers once (main + residual codebook rows, fp32, rounded to x's dtype as the
    dequantized weight would be) and feeds it to one tensor-core dot with BM rows of x. Scale and bias act after
    the sum, as in the GEMV: y = s * (x @ (C + R)^T) + t * sum_j x."""
    pid_g = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_m = tl.program_id(2)
    BN: tl.constexpr = BG * V
    offs_g = pid_g * BG + tl.arange(0, BG)
    g_mask = offs_g < NG
    offs_i = tl.arange(0, V)
    offs_m = pid_m * BM + tl.arange(0, BM)
    m_mask = offs_m < M

    acc = tl.zeros([BM, BN], dtype=tl.float32)
    xsum = tl.zeros([BM], dtype=tl.float32)
    j_start = pid_s * J_PER_SPLIT
    for jj in range(0, J_PER_SPLIT, BJ):
        offs_j = j_start + jj + tl.arange(0, BJ)
        j_mask = offs_j < K
        xt = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_j[None, :], mask=m_mask[:, None] & j_mask[None, :],
                     other=0.0)  # (BM, BJ)
        vec = _decode_tile(idx_ptr, cb_ptr, ridx_ptr, rcb_ptr, offs_j, offs_g, offs_i, j_mask[:, None] & g_mask[None, :],
                           IW, RW, B, RB, V, HAS_RES)  # (BJ, BG, V)
        w = tl.reshape(vec, (BJ, BN)).to(x_ptr.dtype.element_ty)  # column n = g * V + i, as the output's
        if DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
            acc = tl.dot(xt.to(tl.float32), w.to(tl.float32), acc)
        else:
            acc = tl.dot(xt, w, acc)
        if HAS_BIAS:
            xsum += tl.sum(xt.to(tl.float32), axis=1)

    offs_n = pid_g * BN + tl.arange(0, BN)
    n_mask = offs_n < NG * V
    if HAS_SCALE:
        acc = acc * tl.load(s_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(t_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :] * xsum[:, None]
    local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    splitk_epilogue(acc, out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], m_mask[:, None] & n_mask[None, :],
                    ws_ptr, lock_ptr, local, pid_m * tl.num_programs(0) + pid_g, pid_s, S, BM * BN)


@triton.jit
def _vptq_dequant_kernel(
    idx_ptr, cb_ptr, ridx_ptr, rcb_ptr, s_ptr, t_ptr,
    w_ptr,  # (N, K) output, row stride stride_wn
    K, NG, IW, RW, stride_wn,
    B: tl.constexpr, RB: tl.constexpr, V: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
    BG: tl.constexpr, BJ: tl.constexpr,
):
    offs_j = tl.program_id(0) * BJ + tl.arange(0, BJ)
    offs_g = tl.program_id(1) * BG + tl.arange(0, BG)
    offs_i = tl.arange(0, V)
    j_mask = offs_j < K
    g_mask = offs_g < NG
    vec = _decode_tile(idx_ptr, cb_ptr, ridx_ptr, rcb_ptr, offs_j, offs_g, offs_i, j_mask[:, None] & g_mask[None, :],
                       IW, RW, B, RB, V, HAS_RES)  # (BJ, BG, V)
    offs_n = offs_g[:, None] * V + offs_i[None, :]  # (BG, V)
    if HAS_SCALE:
        vec = vec * tl.load(s_ptr + offs_n, mask=g_mask[:, None], other=0.0).to(tl.float32)[None, :, :]
    if HAS_BIAS:
        vec += tl.load(t_ptr + offs_n, mask=g_mask[:, None], other=0.0).to(tl.float32)[None, :, :]
    ptrs = w_ptr + offs_n[None, :, :] * stride_wn + offs_j[:, None, None]
    tl.store(ptrs, vec.to(w_ptr.dtype.element_ty), mask=j_mask[:, None, None] & g_mask[None, :, None])


def _check(what, n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias):
    if codebook.dim() != 2:
        raise CompressError(f"{what}: codebook must be (k, v), got {tuple(codebook.shape)}")
    v = codebook.shape[1]
    if v & (v - 1) or not 1 <= v <= 64:
        raise CompressError(f"{what}: vector_len={v} must be a power of two up to 64 for the kernel")
    if n % v:
        raise CompressError(f"{what}: out_features={n} is not divisible by vector_len={v}")
    ng = n // v
    if not 1 <= index_bits <= 32 or codebook.shape[0] > 2**index_bits:
        raise CompressError(f"{what}: {codebook.shape[0]} centroids do not fit index_bits={index_bits}")
    if indices.dtype != torch.int32 or tuple(indices.shape) != (k, index_words(ng, index_bits)):
        raise CompressError(f"{what}: indices {tuple(indices.shape)} {indices.dtype} do not match weight {(n, k)}; expected int32 "
                            f"{(k, index_words(ng, index_bits))} for {index_bits}-bit indices")
    if (res_indices is None) != (res_codebook is None):
        raise CompressError(f"{what}: pass both res_indices and res_codebook, or neither")
    if res_codebook is not None:
        if res_codebook.shape[1] != v or res_index_bits is None or res_codebook.shape[0] > 2**res_index_bits:
            raise CompressError(f"{what}: residual codebook {tuple(res_codebook.shape)} does not match vector_len={v} / "
                                f"res_index_bits={res_index_bits}")
        if res_indices.dtype != torch.int32 or tuple(res_indices.shape) != (k, index_words(ng, res_index_bits)):
            raise CompressError(f"{what}: res_indices {tuple(res_indices.shape)} do not match; expected int32 "
                                f"{(k, index_words(ng, res_index_bits))}")
    for name, t in (("scale", scale), ("bias", bias)):
        if t is not None and t.numel() != n:
            raise CompressError(f"{what}: {name} has {t.numel()} elements, expected out_features={n}")
    return v, ng


def _gemv(x2, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out,
          config: dict | None = None):
    m, k = x2.shape
    v = codebook.shape[1]
    ng = n // v
    # Sweep (kernel_tune, H100, 8192/512 codebooks): BG64/BJ8/8 warps best of BG {32,64,128} x BJ {4,8,16} x {4,8} warps.
    cfg = config or {"BG": 64 if v <= 8 else 32, "BJ": 8 if v <= 8 else 4, "num_warps": 8}
    bg, bj = cfg["BG"], cfg["BJ"]
    g_tiles = triton.cdiv(ng, bg)
    steps = triton.cdiv(k, bj)
    split = plan_split_k(g_tiles * m, steps, x2.device)
    per = triton.cdiv(steps, split)
    split = triton.cdiv(steps, per)
    ws, locks = splitk_buffers(x2.device, g_tiles * m, split, bg * v)
    has_res = res_codebook is not None
    dummy = codebook
    _vptq_gemv_kernel[(g_tiles, split, m)](
        x2, indices, codebook, res_indices if has_res else indices, res_codebook if has_res else dummy,
        scale if scale is not None else dummy, bias if bias is not None else dummy, out, ws, locks,
        m, k, ng, indices.shape[1], res_indices.shape[1] if has_res else 1, per * bj, split, x2.stride(0), n,
        B=index_bits, RB=res_index_bits if has_res else 1, V=v, HAS_RES=has_res, HAS_SCALE=scale is not None,
        HAS_BIAS=bias is not None, BG=bg, BJ=bj, num_warps=cfg["num_warps"],
    )
    return out


# The few-token kernel's rows: up to 64 tokens (one 64-row tile); above, dequantize + GEMM.
GEMM_MAX_M = 64
GEMM_CONFIG = {"BG": 16, "BJ": 32, "num_warps": 4}  # 128 output columns x 32 input columns a step; not yet tuned


def _gemm(x2, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out,
          config: dict | None = None):
    m, k = x2.shape
    v = codebook.shape[1]
    ng = n // v
    cfg = dict(GEMM_CONFIG, **(config or {}))
    bg, bj = cfg["BG"], cfg["BJ"]
    bm = max(16, triton.next_power_of_2(m)) if m <= GEMM_MAX_M else GEMM_MAX_M
    tiles = triton.cdiv(ng, bg) * triton.cdiv(m, bm)
    steps = triton.cdiv(k, bj)
    split = cfg.get("split") or plan_split_k(tiles, steps, x2.device)
    per = triton.cdiv(steps, split)
    split = triton.cdiv(steps, per)
    ws, locks = splitk_buffers(x2.device, tiles, split, bm * bg * v)
    has_res = res_codebook is not None
    dummy = codebook
    _vptq_gemm_kernel[(triton.cdiv(ng, bg), split, triton.cdiv(m, bm))](
        x2, indices, codebook, res_indices if has_res else indices, res_codebook if has_res else dummy,
        scale if scale is not None else dummy, bias if bias is not None else dummy, out, ws, locks,
        m, k, ng, indices.shape[1], res_indices.shape[1] if has_res else 1, per * bj, split, x2.stride(0), n,
        B=index_bits, RB=res_index_bits if has_res else 1, V=v, HAS_RES=has_res, HAS_SCALE=scale is not None,
        HAS_BIAS=bias is not None, BM=bm, BG=bg, BJ=bj, DOT_F32=interpreter_dot_f32(x2.dtype), num_warps=cfg["num_warps"],
    )
    return out


def gemm_supported(x2: torch.Tensor, codebook: torch.Tensor, outlier_cols: torch.Tensor | None = None) -> str | None:
    """None when `vptq_gemm` can run this call; otherwise why not (the runtime then offers only `vptq_linear`)."""
    m = x2.shape[0]
    if not 1 <= m <= GEMM_MAX_M:
        return f"{m} tokens: the few-token kernel takes 1..{GEMM_MAX_M}"
    if outlier_cols is not None and outlier_cols.numel():
        return "outlier columns: only vptq_linear handles them"
    if codebook.shape[1] * GEMM_CONFIG["BG"] < 16:
        return f"vector_len={codebook.shape[1]}: a tile must be at least 16 columns wide"
    if x2.dtype not in (torch.float16, torch.bfloat16):
        return f"{x2.dtype} activations: the tensor-core dot takes fp16 or bf16"
    return None


def _dequant(n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out):
    """Write W_hat (N, K) into `out` (any (N, K) view with unit column stride)."""
    v = codebook.shape[1]
    ng = n // v
    bj, bg = 32, max(1, 64 // v)
    has_res = res_codebook is not None
    dummy = codebook
    _vptq_dequant_kernel[(triton.cdiv(k, bj), triton.cdiv(ng, bg))](
        indices, codebook, res_indices if has_res else indices, res_codebook if has_res else dummy,
        scale if scale is not None else dummy, bias if bias is not None else dummy, out,
        k, ng, indices.shape[1], res_indices.shape[1] if has_res else 1, out.stride(0),
        B=index_bits, RB=res_index_bits if has_res else 1, V=v, HAS_RES=has_res, HAS_SCALE=scale is not None,
        HAS_BIAS=bias is not None, BG=bg, BJ=bj, num_warps=4,
    )
    return out


def _dequantize_impl(n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
                     outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits, dtype):
    what = "vptq_dequantize"
    check_device(what, indices, codebook, res_indices, res_codebook, scale, bias, outlier_cols, outlier_indices, outlier_codebook)
    _check(what, n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias)
    w = torch.empty(n, k, device=indices.device, dtype=dtype)
    _dequant(n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, w)
    if outlier_cols is not None and outlier_cols.numel():
        n_out = outlier_cols.numel()
        _check(what, n, n_out, outlier_indices, outlier_codebook, outlier_index_bits, None, None, None, scale, bias)
        w_out = torch.empty(n, n_out, device=w.device, dtype=dtype)
        _dequant(n, n_out, outlier_indices, outlier_codebook, outlier_index_bits, None, None, None, scale, bias, w_out)
        w[:, outlier_cols.long()] = w_out
    return w


def _cuda_gemv(x2, n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out):
    """Batch 1 on one of the two CUDA kernels (kernels/vptq_select.py says which). A shape already timed goes
    straight to its kernel: the coverage check and the candidates are for its first call only."""
    tensors = (indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias)
    mode = vptq_select.choice()
    rb = res_index_bits if res_codebook is not None else 0
    key = (x2.device, x2.dtype, n, k, index_bits, codebook.shape[0], rb,
           0 if res_codebook is None else res_codebook.shape[0], scale is None, bias is None)
    label = vptq_select.decided(key) if mode == "auto" else None
    if label is None:
        label = _choose_kernel(mode, key, x2, n, tensors, out)
    if isinstance(label, tuple):
        return vptq_cuda.gemv(x2, n, *tensors, out, name=label[1], coop=label[2])
    return vptq_cluster.gemv(x2, n, *tensors, out, launch=label)


def _choose_kernel(mode: str, key: tuple, x2, n: int, tensors: tuple, out) -> tuple | vptq_cluster.Launch | None:
    """("splitk", variant, coop), a cluster Launch, or None (the cluster kernel's own plan) for a shape not yet
    timed: split-K where pinned or where the cluster kernel does not cover the call, else the timed choice."""
    default = ("splitk", vptq_cuda.variant(), False)
    _, codebook, index_bits, _, res_codebook, res_index_bits, scale, bias = tensors
    if mode == "splitk" or not vptq_cluster.supports(x2, codebook, index_bits, res_codebook, res_index_bits, scale, bias):
        return default
    if mode == "cluster":
        return None
    sms = torch.cuda.get_device_properties(x2.device).multi_processor_count
    options = {("splitk", v, coop): (lambda v=v, coop=coop: vptq_cuda.gemv(x2, n, *tensors, out, name=v, coop=coop))
               for v in dict.fromkeys((default[1], *vptq_select.SPLITK_VARIANTS)) for coop in (False, True)}
    for c in vptq_cluster.candidates(n, sms):
        options[c] = lambda c=c: vptq_cluster.gemv(x2, n, *tensors, out, launch=c)
    return vptq_select.pick(key, options, default)


def _linear_impl(x, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
                 outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits):
    what = "vptq_linear"
    check_device(what, x, indices, codebook, res_indices, res_codebook, scale, bias, outlier_cols, outlier_indices, outlier_codebook)
    k = indices.shape[0]
    _check(what, n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias)
    lead = x.shape[:-1]
    x2 = check_activation(what, x, k)
    m = x2.shape[0]
    has_out = outlier_cols is not None and outlier_cols.numel() > 0
    if m > GEMV_MAX_M:
        w = _dequantize_impl(n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
                             outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits, x.dtype)
        return F.linear(x2, w).reshape(*lead, n)
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0:
        return out.reshape(*lead, n)
    if not has_out:
        contiguous = indices.is_contiguous() and (res_indices is None or res_indices.is_contiguous())
        if contiguous and vptq_cuda.supports(x2, n, codebook, index_bits, res_codebook, res_index_bits, scale, bias):
            _cuda_gemv(x2, n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out)
        else:
            _gemv(x2, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out)
        return out.reshape(*lead, n)
    cols = outlier_cols.long()
    _check(what, n, cols.numel(), outlier_indices, outlier_codebook, outlier_index_bits, None, None, None, scale, bias)
    x_main = x2.clone()
    x_main[:, cols] = 0  # outlier columns contribute through their own codebook only
    main = torch.empty(m, n, device=x.device, dtype=torch.float32)
    side = torch.empty(m, n, device=x.device, dtype=torch.float32)
    _gemv(x_main, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, main)
    _gemv(x2[:, cols].contiguous(), n, outlier_indices, outlier_codebook, outlier_index_bits, None, None, None, scale, bias, side)
    return (main + side).to(x.dtype).reshape(*lead, n)


def _vptq_linear_op_impl(x: torch.Tensor, out_features: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
                         res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
                         scale: torch.Tensor | None, bias: torch.Tensor | None, outlier_cols: torch.Tensor | None,
                         outlier_indices: torch.Tensor | None, outlier_codebook: torch.Tensor | None,
                         outlier_index_bits: int | None) -> torch.Tensor:
    return _linear_impl(x, out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
                        outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits)


_vptq_linear_op = torch.library.custom_op("compress::vptq_linear", _vptq_linear_op_impl, mutates_args=())


@_vptq_linear_op.register_fake
def _(x, out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
      outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits):
    return x.new_empty(*x.shape[:-1], out_features)


def _gemm_impl(x, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, split=0):
    what = "vptq_gemm"
    check_device(what, x, indices, codebook, res_indices, res_codebook, scale, bias)
    k = indices.shape[0]
    _check(what, n, k, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias)
    lead = x.shape[:-1]
    x2 = check_activation(what, x, k)
    why = gemm_supported(x2, codebook)
    if why:
        raise CompressError(f"{what}: {why}")
    out = torch.empty(x2.shape[0], n, device=x.device, dtype=x.dtype)
    contiguous = indices.is_contiguous() and (res_indices is None or res_indices.is_contiguous())
    if contiguous and vptq_gemm_cuda.supports(x2, n, codebook, index_bits, res_codebook, res_index_bits, scale, bias):
        vptq_gemm_cuda.gemm(x2, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
                            out, split=split or None)
    else:
        _gemm(x2, n, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, out)
    return out.reshape(*lead, n)


def _vptq_gemm_op_impl(x: torch.Tensor, out_features: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
                       res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
                       scale: torch.Tensor | None, bias: torch.Tensor | None, split: int = 0) -> torch.Tensor:
    return _gemm_impl(x, out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
                      split)


_vptq_gemm_op = torch.library.custom_op("compress::vptq_gemm", _vptq_gemm_op_impl, mutates_args=())


@_vptq_gemm_op.register_fake
def _(x, out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, split=0):
    return x.new_empty(*x.shape[:-1], out_features)


def _vptq_dequantize_op_impl(out_features: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
                             res_indices: torch.Tensor | None, res_codebook: torch.Tensor | None, res_index_bits: int | None,
                             scale: torch.Tensor | None, bias: torch.Tensor | None, outlier_cols: torch.Tensor | None,
                             outlier_indices: torch.Tensor | None, outlier_codebook: torch.Tensor | None,
                             outlier_index_bits: int | None, dtype: torch.dtype) -> torch.Tensor:
    return _dequantize_impl(out_features, indices.shape[0], indices, codebook, index_bits, res_indices, res_codebook,
                            res_index_bits, scale, bias, outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits, dtype)


_vptq_dequantize_op = torch.library.custom_op("compress::vptq_dequantize", _vptq_dequantize_op_impl, mutates_args=())


@_vptq_dequantize_op.register_fake
def _(out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, outlier_cols,
      outlier_indices, outlier_codebook, outlier_index_bits, dtype):
    return indices.new_empty(out_features, indices.shape[0], dtype=dtype)


@on_input_device
def vptq_linear(x: torch.Tensor, out_features: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
                res_indices: torch.Tensor | None = None, res_codebook: torch.Tensor | None = None,
                res_index_bits: int | None = None, scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                outlier_cols: torch.Tensor | None = None, outlier_indices: torch.Tensor | None = None,
                outlier_codebook: torch.Tensor | None = None, outlier_index_bits: int | None = None) -> torch.Tensor:
    """y = x @ W_hat^T for a compress.vptq layer. x (..., K) fp16/bf16; indices (K, W_words) int32;
    codebook (k, v) fp16; optional residual pair, scale/bias (N,) (the per-channel normalisation, not a
    layer bias) and outlier triple. Returns (..., N) in x's dtype. GEMV for M <= GEMV_MAX_M, else
    dequantize + F.linear."""
    op = (_vptq_linear_op_impl if direct_call(x, indices, codebook, res_indices, res_codebook, scale, bias, outlier_cols,
                                              outlier_indices, outlier_codebook) else torch.ops.compress.vptq_linear)
    return op(x, out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
              outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits)


@on_input_device
def vptq_gemm(x: torch.Tensor, out_features: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
              res_indices: torch.Tensor | None = None, res_codebook: torch.Tensor | None = None,
              res_index_bits: int | None = None, scale: torch.Tensor | None = None,
              bias: torch.Tensor | None = None, split: int = 0) -> torch.Tensor:
    """The same y as `vptq_linear` for 1..GEMM_MAX_M tokens without outlier columns (`gemm_supported` says), in
    one launch that decodes each weight tile once for all tokens (tensor-core dot) instead of dequantizing the
    whole weight. The runtime offers it beside `vptq_linear` and runs whichever it measures faster. split: slices of K
    for the CUDA kernel (0: its plan; `kernels.vptq_gemm_cuda.split_candidates` lists the ones worth timing); the
    Triton kernel ignores it."""
    op = (_vptq_gemm_op_impl if direct_call(x, indices, codebook, res_indices, res_codebook, scale, bias)
          else torch.ops.compress.vptq_gemm)
    return op(x, out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias, split)


@on_input_device
def vptq_dequantize(out_features: int, indices: torch.Tensor, codebook: torch.Tensor, index_bits: int,
                    res_indices: torch.Tensor | None = None, res_codebook: torch.Tensor | None = None,
                    res_index_bits: int | None = None, scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                    outlier_cols: torch.Tensor | None = None, outlier_indices: torch.Tensor | None = None,
                    outlier_codebook: torch.Tensor | None = None, outlier_index_bits: int | None = None,
                    dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """W_hat (N, K) in `dtype`, decoded on the GPU."""
    op = (_vptq_dequantize_op_impl if direct_call(indices, codebook, res_indices, res_codebook, scale, bias, outlier_cols,
                                                  outlier_indices, outlier_codebook) else torch.ops.compress.vptq_dequantize)
    return op(out_features, indices, codebook, index_bits, res_indices, res_codebook, res_index_bits, scale, bias,
              outlier_cols, outlier_indices, outlier_codebook, outlier_index_bits, dtype)


def unpack_indices_ref(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Plain torch, from the contract: index g of row j = bits [g*b, g*b+b) of the row's little-endian stream."""
    words = packed.to(torch.int64) & 0xFFFFFFFF  # (R, W) uint32 values
    bit = torch.arange(count, device=packed.device) * bits
    # Read bit by bit: slow but obviously right, independent of the kernels' word arithmetic.
    out = torch.zeros(packed.shape[0], count, dtype=torch.int64, device=packed.device)
    for t in range(bits):
        pos = bit + t
        out |= ((words[:, pos // 32] >> (pos % 32)) & 1) << t
    return out


def vptq_dequantize_ref(out_features: int, indices, codebook, index_bits, res_indices=None, res_codebook=None,
                        res_index_bits=None, scale=None, bias=None, outlier_cols=None, outlier_indices=None,
                        outlier_codebook=None, outlier_index_bits=None) -> torch.Tensor:
    """(N, K) float32 W_hat from the contract."""
    k, v = indices.shape[0], codebook.shape[1]
    ng = out_features // v
    vec = codebook.float()[unpack_indices_ref(indices, index_bits, ng)]  # (K, G, v)
    if res_codebook is not None:
        vec = vec + res_codebook.float()[unpack_indices_ref(res_indices, res_index_bits, ng)]
    if outlier_cols is not None and outlier_cols.numel():
        vec[outlier_cols.long()] = outlier_codebook.float()[unpack_indices_ref(outlier_indices, outlier_index_bits, ng)]
    w = vec.reshape(k, out_features).t()  # (N, K)
    if scale is not None:
        w = w * scale.float()[:, None]
    if bias is not None:
        w = w + bias.float()[:, None]
    return w


def vptq_linear_ref(x: torch.Tensor, out_features: int, *args, **kwargs) -> torch.Tensor:
    """Plain torch: decode W_hat in fp32, matmul in fp32, cast to x's dtype."""
    w = vptq_dequantize_ref(out_features, *args, **kwargs)
    return (x.float() @ w.t()).to(x.dtype)
