"""Session 13: the W8A8 activation quantizer alone (kernels.w8a8.quantize_per_token, the row kernel, exact-reciprocal
codes), by row length and warps, to see whether long rows (8B down: K = 14336) cost the GEMM behind it at 4..16 tokens.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s13/quant_alone.py OUT
Per-call time by compress.bench.kernel_timing.call_ms (the call repeated in one CUDA graph; x is the same tensor, so
it comes from L2, as it does after the kernel that wrote it). -> OUT/quant_alone.json
"""

from __future__ import annotations

import json
import sys

import torch

from compress.bench import kernel_timing as kt
from kernels.w8a8 import quantize_per_token, quantize_per_token_ref

rows = []
for k in (4096, 8192, 14336, 28672):
    for m in (4, 16):
        x = torch.randn(m, k, device="cuda").half()
        want = quantize_per_token_ref(x)
        r = {"k": k, "m": m}
        for w in (4, 8, 16, 32):
            q, s = quantize_per_token(x, recip=True, warps=w)
            ok = torch.equal(q, want[0]) and torch.equal(s, want[1])
            r[str(w)] = 1000 * kt.call_ms(lambda _: quantize_per_token(x, recip=True, warps=w), None) if ok else None
        rows.append(r)
        print(f"K={k} M={m}: " + " ".join(f"{w} warps {r[str(w)]:.2f} us" if r[str(w)] else f"{w} warps WRONG"
                                         for w in (4, 8, 16, 32)), flush=True)
with open(f"{sys.argv[1]}/quant_alone.json", "w") as f:
    json.dump(rows, f, indent=1)
