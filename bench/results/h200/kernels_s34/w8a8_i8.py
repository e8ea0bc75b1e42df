"""Session 34: is the CUDA int8 tensor-core GEMV's dense mode (kernels/i8_gemv.py, `w8a8_gemv`) faster than what the
runtime serves W8A8 layers with on the H200? Session 10 measured it slower on the H100 at 1, 4 and 16 tokens, so
compress.runtime.formats_ct.CTW8A8Linear does not offer it; the H200's W8A8 rows at 8-16 tokens reach only 15-78% of
the copy bandwidth (bench/results/h200/kernels_s27/call2/kernels_w8a8/kernels.md).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s34/w8a8_i8.py OUT.json [M,M,...]
Per (Llama-3 shape, M), rotate timing (CUDA-graph replays over weight copies >= 2.5x the L2, as the kernel tables):
fp16 F.linear; the runtime's W8A8 paths (kernels.w8a8.w8a8_linear; torch._int_mm above 16 tokens; the one-token dp4a
GEMV); the dense int8 GEMV for every build x waves 0.5 / 1 / 2 (the activation quantizer included), each output
checked against kernels.w8a8.w8a8_linear's (the same integer math: equal up to fp16 rounding of the scaled sums).
Prints one line per row and, per M, the median speedup over fp16 of the served paths and of the best of both.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import graph_us, weight_copies
from compress.runtime import kernel_bridge as kb
from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8
from kernels import i8_gemv
from kernels.cases import LLAMA_SHAPES, make_w8a8
from kernels.w8a8 import w8a8_linear

out = sys.argv[1]
MS = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2, 4, 8, 16, 32, 64]
WAVES = (0.5, 1.0, 2.0)
t0 = time.time()


def us_of(fn, copies):
    return graph_us([lambda w=w: fn(w) for w in copies])


rows = []
for label, n, k in LLAMA_SHAPES:
    w16 = (torch.randn(n, k, device="cuda") / k**0.5).half()
    wq, sw = make_w8a8(n, k, "cuda", seed=n + k)
    c16, cq = weight_copies(w16), weight_copies((wq, sw))
    for m in MS:
        x = torch.randn(m, k, device="cuda").half()
        want = w8a8_linear(x, wq, sw)
        row = {"layer": label, "N": n, "K": k, "M": m, "fp16": us_of(lambda w: F.linear(x, w), c16)}
        served = {"w8a8_triton": us_of(lambda w: w8a8_linear(x, w[0], w[1]), cq)}
        if kb.int_mm_fits(m, k, n):
            served["int_mm"] = us_of(lambda w: kb.int_mm_w8a8(x, w[0], w[1]), cq)
        if m == 1:
            for c in GEMV_I8_CONFIGS:
                served["gemv_i8_%dx%d_w%d" % c] = us_of(lambda w, c=c: gemv_i8(x, None, w[0], w[1], x.dtype, c), cq)
        ours = {}
        for name in sorted(i8_gemv.VARIANTS):
            for waves in WAVES:
                fn = lambda w, name=name, waves=waves: i8_gemv._launch(x, w[0], w[1], None, name=name, waves=waves)  # noqa: E731
                err = (fn((wq, sw)).float() - want.float()).abs().max().item()
                tol = 2e-3 * want.float().abs().max().item() + 1e-3
                ours[f"{name} {waves}"] = us_of(fn, cq) if err <= tol else float("nan")
                if err > tol:
                    print(f"  MISMATCH {label} M={m} {name} {waves}: max |diff| {err:.4g} > {tol:.4g}", flush=True)
        row["served"], row["i8"] = served, ours
        best_s = min(served, key=served.get)
        good = {c: v for c, v in ours.items() if v == v}
        best_i = min(good, key=good.get) if good else None
        row["served_best"], row["i8_best"] = best_s, best_i
        rows.append(row)
        i8_txt = f"{good[best_i]:7.2f} ({best_i})" if best_i else "none passed"
        print(f"{label:17s} M={m:3d} fp16 {row['fp16']:7.2f} us | served {served[best_s]:7.2f} ({best_s}) | i8 dense "
              f"{i8_txt} [{time.time() - t0:.0f} s]", flush=True)
    del w16, wq, sw, c16, cq
    torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)

print("\nmedian speedup over fp16 over the shapes:")
for m in MS:
    r = [x for x in rows if x["M"] == m]
    s = [x["fp16"] / x["served"][x["served_best"]] for x in r]
    b = [x["fp16"] / min(x["served"][x["served_best"]], x["i8"].get(x["i8_best"], float("inf"))) for x in r]
    wins = sum(1 for x in r if x["i8_best"] and x["i8"][x["i8_best"]] < x["served"][x["served_best"]])
    print(f"M={m:3d}: served {statistics.median(s):.3f}x, best of served and i8 dense {statistics.median(b):.3f}x "
          f"(i8 dense faster on {wins} of {len(r)} shapes)")
print(f"done in {time.time() - t0:.0f} s")
