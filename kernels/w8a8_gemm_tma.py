"""W8A8 int8 x int8 -> int32 GEMM for many tokens (M ~ 32..1024) on Hopper: TMA tiles, persistent grid.

Same math as kernels/w8a8.py (its module docstring; `w8a8_linear_ref` is the reference):
    y[m, n] = (sum_k q_x[m, k] * w[n, k]) * s_x[m] * s_w[n]        (int32 accumulation, fp32 epilogue)
x is quantized first by kernels.w8a8.quantize_per_token (one pass, as on the other paths); this file is the GEMM.

Why a second GEMM: session 5's `_w8a8_kernel` at M = 256 ran 0.56-1.30x of fp16 cuBLAS on the Llama-3 shapes
(bench/results/h100/kernels_s5/), with pointer loads that Triton pipelines through cp.async. Here both operands
come in by the bulk tensor copy engine (host-built `TensorDescriptor`s: TMA, zero fill past the edges, so no
masks in the K loop), the token tile is the left operand in its natural (M, K) layout and the weight tile the
K-major right one (what int8 wgmma wants), and one program per SM walks the output tiles (persistent grid;
optionally `warp_specialize`: a producer warp feeds the tensor cores while the others consume).

Tile order: the token tiles of one weight tile are consecutive tile ids, so programs running side by side share
the weight tile in L2 and the weights come from DRAM once. When the tiles are fewer than half the SMs, K is split
(kernels._common's one-launch split-K reduction, the last program of a tile sums the partials in fixed order).

Status (session 7, H100, bench/results/h100/kernels_s7_w8a8/README.md): opt-in only (a config with kind "tma",
through COMPRESS_KERNEL_CONFIGS or `_launch(..., config)`); no M serves it by default. The one sweep that ran timed
8B q/o at M = 256 (quantizer included): best TMA config 28.8 us, session 5's pointer GEMM 27.6 us, fp16 cuBLAS
18.3 us. Every TMA config there ran with K split to >= 1 wave (before the one-wave rule below); the unsplit,
warp-specialized form and the other shapes were not timed (no device time was left).

Public: `launch(xq, sx, weight, sw, out, cfg)` (called by kernels.w8a8 for configs with kind "tma"), `plan`,
`supports(weight, n, k)`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._common import interpreting, num_sms, plan_split_k, splitk_buffers, splitk_epilogue
from kernels.op_dispatch import on_input_device


@triton.jit
def _w8a8_tma_kernel(
    # tensors
    x_desc,  # TensorDescriptor over the int8 activations (M, K), block (BM, BK)
    w_desc,  # TensorDescriptor over the int8 weights (N, K), block (BN, BK)
    sx_ptr,  # (M,) fp32 token scales
    sw_ptr,  # (N,) channel scales (any float dtype)
    out_ptr,  # (M, N) fp16/bf16
    ws_ptr,  # split-K workspace (fp32), unused when S == 1
    lock_ptr,  # split-K tile counters (int32)
    # sizes
    M,
    N,
    K,
    K_PER_SPLIT,  # multiple of BK
    S,  # K splits
    stride_om,
    # meta
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    NUM_PROGS,  # programs of the persistent grid
    WARP_SPEC: tl.constexpr,  # tl.range(..., warp_specialize=True) over the tiles
    SWAP: tl.constexpr,  # weights as the left operand (config "swap"; for M <= 64)
    SPLIT_K: tl.constexpr,  # S > 1: partial sums through the workspace
    PDL: tl.constexpr,  # launched with programmatic dependent launch: wait for the quantizer before reading x
):
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(M, BM)
    n_tiles = tl.cdiv(N, BN)
    tiles = m_tiles * n_tiles * S
    if PDL:
        gdc_wait()
    for t in tl.range(pid, tiles, NUM_PROGS, warp_specialize=WARP_SPEC):
        pid_m = t % m_tiles  # token tiles fastest: the weight tile is shared in L2 by the programs beside it
        rest = t // m_tiles
        pid_n = rest % n_tiles
        pid_s = rest // n_tiles
        k_start = pid_s * K_PER_SPLIT
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        m_mask = offs_m < M
        n_mask = offs_n < N
        sx = tl.load(sx_ptr + offs_m, mask=m_mask, other=0.0)
        sw = tl.load(sw_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        if SWAP:  # (BN, BM) = w (BN, BK) @ x^T (BK, BM): the weight tile fills wgmma's 64-row side at few tokens
            acc = tl.zeros([BN, BM], dtype=tl.int32)
            for kk in range(0, K_PER_SPLIT, BK):
                a = x_desc.load([pid_m * BM, k_start + kk])  # (BM, BK) int8, zeros past M and K
                b = w_desc.load([pid_n * BN, k_start + kk])  # (BN, BK) int8, zeros past N and K
                acc = tl.dot(b, a.T, acc, out_dtype=tl.int32)
            out = acc.to(tl.float32) * sw[:, None] * sx[None, :]  # the other W8A8 kernels' order: acc * s_w * s_x
            ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
            mask = n_mask[:, None] & m_mask[None, :]
            local = tl.arange(0, BN)[:, None] * BM + tl.arange(0, BM)[None, :]
        else:
            acc = tl.zeros([BM, BN], dtype=tl.int32)
            for kk in range(0, K_PER_SPLIT, BK):
                a = x_desc.load([pid_m * BM, k_start + kk])
                b = w_desc.load([pid_n * BN, k_start + kk])
                acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
            out = acc.to(tl.float32) * sw[None, :] * sx[:, None]
            ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
            mask = m_mask[:, None] & n_mask[None, :]
            local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        if SPLIT_K:
            splitk_epilogue(out, ptrs, mask, ws_ptr, lock_ptr, local, pid_n * m_tiles + pid_m, pid_s, S, BM * BN)
        else:  # a plain store keeps the tile loop free of barriers and atomics (warp_specialize needs that)
            tl.store(ptrs, out.to(out_ptr.dtype.element_ty), mask=mask)


# TMA needs 16-byte aligned bases and row strides: K multiple of 16 (int8), checked by kernels.w8a8 already.
TMA_ALIGN = 16
MIN_SPLIT_STEPS = 4  # K steps per split at least (the pipeline's 3-4 stage prologue would dominate shorter ones)


def supports(weight: torch.Tensor, n: int, k: int) -> bool:
    """Whether the TMA GEMM can take this weight: a contiguous (N, K) int8 matrix on a 16-byte boundary."""
    return (weight.is_contiguous() and k % TMA_ALIGN == 0 and weight.data_ptr() % TMA_ALIGN == 0
            and (interpreting() or (weight.is_cuda and torch.cuda.get_device_capability(weight.device)[0] >= 9)))


def plan(m: int, n: int, k: int, cfg: dict, device: torch.device) -> tuple[int, int, int]:
    """(split, K per split, programs) for a config: split K only when the output tiles leave SMs idle."""
    tiles = triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"])
    k_steps = triton.cdiv(k, cfg["BK"])
    split = cfg.get("split")
    if not split and cfg.get("waves"):
        split = plan_split_k(tiles, k_steps, device, cfg["waves"])
    if not split:
        # The most splits that still fit one wave (tiles x split <= SMs), each at least MIN_SPLIT_STEPS long: rounding
        # up to fill the SMs (`waves` 1) left a second, partial wave (session 7 sweep, call 1: 192 units on 132 SMs).
        split = max(1, min(num_sms(device) // tiles, k_steps // MIN_SPLIT_STEPS))
    per_steps = triton.cdiv(k_steps, split)
    split = triton.cdiv(k_steps, per_steps)  # no empty split
    progs = min(tiles * split, cfg.get("progs") or num_sms(device))
    return split, per_steps * cfg["BK"], progs


def _warp_spec(cfg: dict) -> bool:
    """warp_specialize as the config asks, except with swap: on the H100 (session 8, Triton 3.6) the warp-specialized
    swapped kernel made an illegal memory access in tests/test_s7_w8a8_tma.py's CUDA-graph test (BM 64, BN 128, one
    tile per program) and stalled session 8's sweep (BM 16, BN 128 on 14336 x 4096); swapped configs run the
    plain software pipeline. (Unswapped and unsplit, warp specialization has not run on the GPU yet: every TMA config
    timed so far split K, which turns it off.)"""
    return bool(cfg.get("ws")) and not cfg.get("swap") and not interpreting()


@on_input_device
def launch(xq: torch.Tensor, sx: torch.Tensor, weight: torch.Tensor, sw: torch.Tensor, out: torch.Tensor, cfg: dict,
           pdl: bool = False) -> torch.Tensor:
    """out (M, N) = (xq @ weight^T) * sx[:, None] * sw[None, :] for quantized xq (M, K) int8 with scales sx (M,)
    fp32 and the int8 weight (N, K) with scales sw (N,). cfg: BM, BN, BK, num_warps, num_stages, and optionally
    ws (warp_specialize), swap, split (K splits; default: fit one wave) / waves (split-K until `waves` programs per SM), progs (grid size). pdl: launched with programmatic
    dependent launch behind the quantizer (it must have been launched with early=True)."""
    m, k = xq.shape
    n = weight.shape[0]
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    split, k_per_split, progs = plan(m, n, k, cfg, xq.device)
    ws, locks = splitk_buffers(xq.device, triton.cdiv(m, bm) * triton.cdiv(n, bn), split, bm * bn)
    x_desc = TensorDescriptor.from_tensor(xq, [bm, bk])
    w_desc = TensorDescriptor.from_tensor(weight, [bn, bk])
    pdl = pdl and not interpreting()
    _w8a8_tma_kernel[(progs,)](
        x_desc, w_desc, sx, sw, out, ws, locks, m, n, k, k_per_split, split, out.stride(0),
        BM=bm, BN=bn, BK=bk, NUM_PROGS=progs, WARP_SPEC=_warp_spec(cfg),
SWAP=bool(cfg.get("swap")), SPLIT_K=split > 1, PDL=pdl,
        num_warps=cfg.get("num_warps", 4), num_stages=cfg.get("num_stages", 4), **({"launch_pdl": True} if pdl else {}))
    return out
