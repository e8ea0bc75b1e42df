"""W8A16 for many rows (prefill, large batches): a tiled GEMM that reads the int8 weights itself.

Why: above 64 rows the only W8A16 path was "dequantize into an fp16 temporary, then cuBLAS"
(`decode_kernels.dequant_w8`). The temporary is twice the int8 weight and is written and read back on
every call: 146 us a call for Llama-3-8B's fused gate/up (28672 x 4096) on the H100, 18.8 of the 27.3 ms
of a 256-token W8A16 prefill (bench/results/h100/e2e/session20/README.md). Here each weight tile goes from
DRAM to registers as int8, is scaled to fp16/bf16 there and goes straight into the tensor-core product.

Math: w = q * s rounded once to the activation dtype -- exactly the temporary `dequant_w8` writes (there the
product is taken in fp32; int8 values are exact in fp16/bf16, so one correctly rounded multiplication in the
dtype gives the same value) -- then y = x @ w^T with fp32 accumulation, as cuBLAS does with that temporary.
The two paths differ only in the order of the fp32 sums.

Layout of a program's work ("swap AB", as the few-row kernel): the weight tile (BLOCK_N, BLOCK_K) is the
left operand, so it can stay in registers after its conversion, and x^T's tile (BLOCK_K, BLOCK_M) the right
one. Programs are numbered M-tile first within groups of row tiles whose rows of x fit a share of the L2
(`X_L2_BYTES`): the M tiles of one weight tile run side by side, so each weight byte comes from DRAM about once a
group and the rest of its reads hit L2, while the group's x stays in L2 for every weight tile.

Measured (H100, session 22, bench/results/h100/kernels_s22/README.md): 1.2-2.5x faster than dequantize + cuBLAS
at 256 rows on Llama-3-8B's layers, slower from about 1-2k rows (the kernel tops out near 400 TFLOP/s, cuBLAS's
fp16 GEMM near 650); the path table takes whichever is faster per shape and M.

Symmetric weights only (zero points: the dequantize path), group sizes that are powers of two >= 16, or one
scale per row (`group_size` = K). On a CPU it runs in Triton's interpreter (tests only).
"""

from __future__ import annotations

import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU-only machines before triton loads)
import triton
import triton.language as tl

from kernels.op_dispatch import on_input_device


@triton.jit
def _gemm_w8_tiled(x_ptr, q_ptr, s_ptr, y_ptr, M, N, G, stride_xm, stride_ym, GROUP_M, K: tl.constexpr, GS: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr):
    """y (M, N) = x (M, K) @ w^T, w = (q (N, K) int8 * s (N, G) per GS columns) in x's dtype.
    BLOCK_K divides GS, so every column tile lies in one group (one scale per weight row and tile)."""
    # Programs in groups of GROUP_M row tiles: within a group the row tiles of one weight tile run side by side
    # (each weight byte from DRAM about once a group) and the group's rows of x stay in L2 while every weight
    # tile passes (x is read from DRAM about once in all).
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    per_group = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    m_mask = offs_m < M
    q_rows = q_ptr + offs_n.to(tl.int64)[:, None] * K + offs_k[None, :]  # (BLOCK_N, BLOCK_K)
    x_cols = x_ptr + offs_m.to(tl.int64)[None, :] * stride_xm + offs_k[:, None]  # (BLOCK_K, BLOCK_M): x^T
    s_rows = s_ptr + offs_n * G
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        q = tl.load(q_rows + k0, mask=n_mask[:, None] & k_ok[None, :], other=0)
        sc = tl.load(s_rows + k0 // GS, mask=n_mask, other=0.0).to(x_ptr.dtype.element_ty)
        xt = tl.load(x_cols + k0, mask=k_ok[:, None] & m_mask[None, :], other=0.0)
        # The dequantized temporary's values: int8 is exact in fp16/bf16 and one multiplication rounds the exact
        # product q * s once, as the fp32 product rounded to the dtype.
        w = q.to(x_ptr.dtype.element_ty) * sc[:, None]
        if DOT_F32:  # Triton's CPU interpreter multiplies bf16 bit patterns as integers
            acc = tl.dot(w.to(tl.float32), xt.to(tl.float32), acc)
        else:
            acc = tl.dot(w, xt, acc)
    y = y_ptr + offs_m.to(tl.int64)[None, :] * stride_ym + offs_n[:, None]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=n_mask[:, None] & m_mask[None, :])


# (BLOCK_N, BLOCK_M, BLOCK_K, num_warps, num_stages) the path table tries (column tiles shrink to the group
# size where groups are narrower). Session 22 (bench/results/h100/kernels_s22/README.md), on the 8B fused qkv, o,
# fused gate/up and down shapes at 64..8192 rows: 13 tilings in call 1; these won at least one row there: 128 x 128
# and 128 x 256 from 256-512 rows up, 64 x 64 and 64 x 32 on the narrow layers (N = 4096-6144) at 64-256 rows,
# 128 x 64 on gate/up at 64 rows. Call 4 also tried x as the left operand (four tilings, at 5705aab): it won no row.
TILED_W8_CONFIGS = ((128, 128, 64, 8, 4), (128, 128, 128, 8, 3), (128, 256, 64, 8, 3), (128, 64, 128, 4, 4),
                    (64, 64, 128, 4, 4), (64, 32, 128, 4, 5))
TILED_W8_MIN_M = 17  # below it the few-row kernel pads less and is always offered
# Bytes of x a group of row tiles may hold in L2 (a third of the H100's 50 MB): 2048 rows of K = 4096 in fp16.
# Session 22's first probe ordered programs row tile first over all of M: at 8192 rows x (64 MB) no longer fit,
# and every weight tile read it again from DRAM (fused gate/up 5.1 ms against 3.2 for dequantize + cuBLAS).
X_L2_BYTES = 16 * 2**20


def tiled_w8_supported(k: int, group_size: int) -> bool:
    """Whether `gemm_w8_tiled` takes this layer: per-row scales (group_size == k) or power-of-two groups >= 16."""
    if group_size == k:
        return k >= 16
    return group_size >= 16 and group_size & (group_size - 1) == 0 and k % group_size == 0


@on_input_device
def gemm_w8_tiled(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int,
                  config: tuple[int, int, int, int, int] = TILED_W8_CONFIGS[0]) -> torch.Tensor:
    """x (M, K) fp16/bf16 @ (q (N, K) int8 * scale (N, K / group_size))^T -> (M, N) in x's dtype."""
    n, k = q.shape
    m = x.shape[0]
    g = scale.shape[1]
    assert x.dim() == 2 and x.shape[1] == k and x.stride(1) == 1, (x.shape, q.shape)
    assert q.is_contiguous() and scale.shape[0] == n and scale.stride(1) == 1, (q.shape, scale.shape)
    assert tiled_w8_supported(k, group_size) and g == k // group_size, (k, group_size, g)
    block_n, block_m, block_k, warps, stages = config
    gs = group_size if g > 1 else triton.next_power_of_2(k)  # one group: every tile's scale is column 0
    block_k = min(block_k, gs)
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    group_m = max(1, X_L2_BYTES // (block_m * k * x.element_size()))
    _gemm_w8_tiled[grid](x, q, scale, y, m, n, g, x.stride(0), y.stride(0), group_m, K=k, GS=gs, BLOCK_N=block_n,
                         BLOCK_M=block_m, BLOCK_K=block_k, DOT_F32=x.device.type == "cpu",
                         num_warps=warps, num_stages=stages)
    return y


def gemm_w8_tiled_ref(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    """The same math in torch: the dequantized temporary (the runtime's own dequantization of W8A16 layers: fp32
    products rounded to x's dtype), fp32 GEMM. group_size is implied by scale's columns there."""
    from compress.runtime.formats_ct import _dequant_weight_only

    w = _dequant_weight_only(q, scale, None, q.shape[1], x.dtype)
    return (x.float() @ w.float().t()).to(x.dtype)
