"""Session 15: how fast the one-token GEMVs' weight streams can be read at all, with no arithmetic, on the 8 Llama-3
shapes. A Triton kernel reads a layer's weight arrays in the GEMV's own tiling (BN rows x a K step per program, the
next step's tile requested before this one is summed, K split by the same waves rule) and XORs every word into one
output word per row (so nothing can be skipped). Compared: the 2:4 int8 arrays (values, N x K/2 bytes, and meta,
N x K/8 bytes), the values alone, and a dense int8 weight (N x K bytes), each in the 2:4 PRMT GEMV's tile (32 rows x
16 meta words = 256 B of values + 64 B of meta per row per step, 8 warps, 2 waves) and in the dense int8 GEMV's
(8 rows x 2 KB, 4 warps, no split). GB/s = bytes read / time (rotating weights, the kernel table's timing).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s15/read_probe.py OUT -> OUT/read_probe.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (1024, 8192), (28672, 8192),
          (8192, 28672)]


@triton.jit
def _read_kernel(a_ptr, b_ptr, out_ptr, N, AW, BWD, A_PER_STEP: tl.constexpr, B_PER_STEP: tl.constexpr,
                 STEPS_PER_SPLIT, BN: tl.constexpr, HAS_B: tl.constexpr):
    """XOR of rows' words: array a (N, AW) int32 read A_PER_STEP words a row per step, b (N, BWD) B_PER_STEP."""
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_n = pid_n * BN + tl.arange(0, BN)
    n_mask = offs_n < N
    oa = tl.arange(0, A_PER_STEP)
    ob = tl.arange(0, B_PER_STEP)
    s0 = pid_s * STEPS_PER_SPLIT
    acc = tl.zeros([BN, A_PER_STEP], tl.int32)
    acc_b = tl.zeros([BN, B_PER_STEP], tl.int32)
    ia = s0 * A_PER_STEP + oa
    a = tl.load(a_ptr + offs_n[:, None] * AW + ia[None, :], mask=n_mask[:, None] & (ia < AW)[None, :], other=0)
    if HAS_B:
        ib = s0 * B_PER_STEP + ob
        b = tl.load(b_ptr + offs_n[:, None] * BWD + ib[None, :], mask=n_mask[:, None] & (ib < BWD)[None, :], other=0)
    for st in range(s0, s0 + STEPS_PER_SPLIT):
        ia = (st + 1) * A_PER_STEP + oa
        ok = st + 1 < s0 + STEPS_PER_SPLIT
        a_n = tl.load(a_ptr + offs_n[:, None] * AW + ia[None, :], mask=n_mask[:, None] & (ia < AW)[None, :] & ok, other=0)
        if HAS_B:
            ib = (st + 1) * B_PER_STEP + ob
            b_n = tl.load(b_ptr + offs_n[:, None] * BWD + ib[None, :], mask=n_mask[:, None] & (ib < BWD)[None, :] & ok,
                          other=0)
            acc_b ^= b
            b = b_n
        acc ^= a
        a = a_n
    r = tl.xor_sum(acc, axis=1)
    if HAS_B:
        r ^= tl.xor_sum(acc_b, axis=1)
    tl.atomic_xor(out_ptr + offs_n, r, mask=n_mask)


def _xor_rows(t: torch.Tensor) -> torch.Tensor:
    r = torch.zeros(t.shape[0], device=t.device, dtype=torch.int32)
    for c in range(t.shape[1]):
        r ^= t[:, c]
    return r


def _launch(arrs, out, bn, a_step, b_step, warps, waves):
    from kernels._common import plan_split_k
    a = arrs[0]
    b = arrs[1] if len(arrs) > 1 else a
    n, aw = a.shape
    steps = triton.cdiv(aw, a_step)
    tiles = triton.cdiv(n, bn)
    split = plan_split_k(tiles, steps, a.device, waves) if waves else 1
    per = triton.cdiv(steps, split)
    split = triton.cdiv(steps, per)
    _read_kernel[(tiles, split)](a, b, out, n, aw, b.shape[1], A_PER_STEP=a_step, B_PER_STEP=b_step if len(arrs) > 1 else 1,
                                 STEPS_PER_SPLIT=per, BN=bn, HAS_B=len(arrs) > 1, num_warps=warps)
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    from compress.bench import kernel_timing as kt
    rows = []
    for n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(n + k)
        vals = torch.randint(-2**31, 2**31 - 1, (n, k // 8), device="cuda", dtype=torch.int32, generator=g)
        meta = torch.randint(-2**31, 2**31 - 1, (n, k // 32), device="cuda", dtype=torch.int32, generator=g)
        dense = torch.randint(-2**31, 2**31 - 1, (n, k // 4), device="cuda", dtype=torch.int32, generator=g)
        out = torch.zeros(n, device="cuda", dtype=torch.int32)
        arms = {  # name: (arrays, BN, words of a per step, words of b per step, warps, waves)
            "sp24 values+meta, PRMT-GEMV tile": ((vals, meta), 32, 64, 16, 8, 2.0),
            "sp24 values only, PRMT-GEMV tile": ((vals,), 32, 64, 16, 8, 2.0),
            "sp24 values+meta, dense-GEMV tile": ((vals, meta), 8, 512, 128, 4, None),
            "dense int8, dense-GEMV tile": ((dense,), 8, 512, 1, 4, None),
            "dense int8, PRMT-GEMV tile": ((dense,), 32, 128, 1, 8, 2.0),
        }
        r = {"n": n, "k": k, "gbs": {}, "us": {}}
        for name, (arrs, bn, a_step, b_step, warps, waves) in arms.items():
            nbytes = sum(t.numel() * 4 for t in arrs)
            fn = lambda w, bn=bn, a_step=a_step, b_step=b_step, warps=warps, waves=waves: _launch(  # noqa: E731
                w, out, bn, a_step, b_step, warps, waves)
            out.zero_()
            fn(arrs)
            want = torch.zeros(n, device="cuda", dtype=torch.int32)
            for t in arrs:
                want ^= _xor_rows(t)
            assert torch.equal(out, want), name  # every word was read
            us = kt.call_ms(fn, arrs) * 1000
            r["us"][name], r["gbs"][name] = us, nbytes / us / 1e3
        rows.append(r)
        print(f"{n}x{k}: " + " | ".join(f"{a} {r['us'][a]:.1f} us {r['gbs'][a]:.0f} GB/s" for a in arms), flush=True)
        with open(f"{out_dir}/read_probe.json", "w") as f:
            json.dump(rows, f, indent=1)
        del vals, meta, dense
        torch.cuda.empty_cache()
    for a in rows[0]["gbs"]:
        print(f"median GB/s {a}: {statistics.median(r['gbs'][a] for r in rows):.0f}", flush=True)


if __name__ == "__main__":
    main()
