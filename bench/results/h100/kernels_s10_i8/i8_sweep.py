"""Session 10: the CUDA int8 GEMV (kernels/i8_gemv.py) against fp16 and against what the runtime served before it, on the
8 Llama-3 shapes, timed like the kernel tables (rotate: CUDA-graph replays over weight copies >= 2.5x the L2).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s10_i8/i8_sweep.py OUT_DIR [M,M,...]
Per (shape, M): fp16 F.linear; dense W8A8: every build variant x waves of the new GEMV (quantizer included; with the
in-kernel quantizer at few tokens), the old
served paths (kernels.w8a8.w8a8_linear with its config; the runtime's one-token dp4a GEMV at M = 1); 2:4 int8: every
variant x waves of the new GEMV, the Triton 2:4 kernel (kernels.sparse24). Writes OUT/sweep.json and prints the
per-M medians of speedup over fp16 (dense) and over the best dense int8 path (2:4)."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import graph_us, weight_copies
from kernels import i8_gemv
from kernels.cases import LLAMA_SHAPES, make_sparse24, make_w8a8

out_dir = Path(sys.argv[1])
out_dir.mkdir(parents=True, exist_ok=True)
MS = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 4, 16]
SCHEDULES = ["0.5", "1.0"]  # waves
QIN_M = 4  # the in-kernel quantizer is also timed up to this many tokens (waves 1)
# Calls 1-3 of session 10 ran earlier forms of this script: call 1 waves 0.5 / 1 / 2 without the in-kernel quantizer;
# call 2 waves 0.5 / 1 and the in-kernel quantizer, 10 builds; call 3 "split 0.5", "bal 1.0", "bal 0.5" (the balanced
# schedule, since removed) and the in-kernel quantizer.
VARIANTS = sorted(i8_gemv.VARIANTS)
t0 = time.time()
rows = []


def ms_of(fn, copies):
    """Per-call ms of fn(w) over pre-built weight copies (the tables' rotate timing without re-cloning per config)."""
    return graph_us([lambda w=w: fn(w) for w in copies]) / 1000.0


def ours(x, name, waves, qin=False):
    from kernels.w8a8 import quantize_per_token

    def fn(wt):
        if qin:  # every CTA quantizes x itself
            return i8_gemv.launch_quantized(x, None, wt[0], wt[1], x.dtype, wt[2], name=name, waves=waves)
        xq, sx = quantize_per_token(x, early=True, recip=True)
        return i8_gemv.launch_quantized(xq, sx, wt[0], wt[1], x.dtype, wt[2], name=name, waves=waves)
    return fn


for label, n, k in LLAMA_SHAPES:
    w16 = (torch.randn(n, k, device="cuda") / k**0.5).half()
    wq, sw = make_w8a8(n, k, "cuda", seed=n + k)
    q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
    frag = i8_gemv.pack_meta_fragments(q["meta"], n, k)
    c16, cd = weight_copies(w16), weight_copies((wq, sw, None))
    csp = weight_copies((q["values"], q["w_scale"], frag))
    csp_old = weight_copies((q["values"], q["meta"], q["w_scale"]))
    for m in MS:
        x = torch.randn(m, k, device="cuda").half()
        row = {"layer": label, "N": n, "K": k, "M": m}
        row["fp16"] = ms_of(lambda w: F.linear(x, w), c16)
        from kernels.w8a8 import w8a8_linear

        row["w8a8_triton"] = ms_of(lambda w: w8a8_linear(x, w[0], w[1]), cd)
        if m == 1:
            from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8

            row["gemv_i8"] = min(ms_of(lambda w, c=c: gemv_i8(x, None, w[0], w[1], x.dtype, c), cd)
                                 for c in GEMV_I8_CONFIGS)
        from kernels.sparse24 import sparse24_w8a8_linear

        row["sp24_triton"] = ms_of(lambda w: sparse24_w8a8_linear(x, w[0], w[1], w[2]), csp_old)
        for name in VARIANTS:
            for sched in SCHEDULES:
                row[f"dense {name} {sched}"] = ms_of(ours(x, name, float(sched)), cd)
                row[f"sp24 {name} {sched}"] = ms_of(ours(x, name, float(sched)), csp)
            if m <= QIN_M:
                row[f"dense {name} qin"] = ms_of(ours(x, name, 1.0, True), cd)
                row[f"sp24 {name} qin"] = ms_of(ours(x, name, 1.0, True), csp)
        dense_new = {c: v for c, v in row.items() if c.startswith("dense ")}
        sp_new = {c: v for c, v in row.items() if c.startswith("sp24 ")}
        row["dense_best"] = min(dense_new, key=dense_new.get)
        row["sp24_best"] = min(sp_new, key=sp_new.get)
        old_dense = min(row["w8a8_triton"], row.get("gemv_i8", float("inf")))
        row["old_dense"] = old_dense
        rows.append(row)
        print(f"{label:18s} M={m:2d} fp16 {row['fp16'] * 1e3:7.2f} us | dense old {old_dense * 1e3:7.2f} "
              f"new {row[row['dense_best']] * 1e3:7.2f} ({row['dense_best']}, default "
              f"{row[f'dense {i8_gemv.DEFAULT_VARIANT} {i8_gemv.default_waves(m)}'] * 1e3:.2f}) | 2:4 old "
              f"{row['sp24_triton'] * 1e3:7.2f} new {row[row['sp24_best']] * 1e3:7.2f} ({row['sp24_best']}) "
              f"[{time.time() - t0:.0f} s]", flush=True)
    del w16, wq, sw, q, frag, c16, cd, csp, csp_old
    torch.cuda.empty_cache()

(out_dir / "sweep.json").write_text(json.dumps(rows, indent=1))


def med(vals):
    return statistics.median(vals)


print("\nmedian over the 8 shapes (speedup over fp16 unless said):")
for m in MS:
    r = [x for x in rows if x["M"] == m]
    dflt = f"{i8_gemv.DEFAULT_VARIANT} {i8_gemv.default_waves(m)}"
    line = (f"M={m:2d}: dense old {med([x['fp16'] / x['old_dense'] for x in r]):.3f}x, new default "
            f"{med([x['fp16'] / x['dense ' + dflt] for x in r]):.3f}x, new best per shape "
            f"{med([x['fp16'] / x[x['dense_best']] for x in r]):.3f}x, best of old/new per shape "
            f"{med([x['fp16'] / min(x['old_dense'], x[x['dense_best']]) for x in r]):.3f}x")
    for cfg in [f"{v} {w}" for v in VARIANTS for w in SCHEDULES + (["qin"] if m <= QIN_M else [])]:
        line += f"\n    dense {cfg}: {med([x['fp16'] / x['dense ' + cfg] for x in r]):.3f}x" \
                f"   2:4 {cfg} over best dense: {med([min(x['old_dense'], x[x['dense_best']]) / x['sp24 ' + cfg] for x in r]):.3f}x"
    line += (f"\n  2:4 over the best dense int8 path (old or new): old 2:4 "
             f"{med([min(x['old_dense'], x[x['dense_best']]) / x['sp24_triton'] for x in r]):.3f}x, new best per shape "
             f"{med([min(x['old_dense'], x[x['dense_best']]) / x[x['sp24_best']] for x in r]):.3f}x")
    print(line)
print(f"done in {time.time() - t0:.0f} s")
