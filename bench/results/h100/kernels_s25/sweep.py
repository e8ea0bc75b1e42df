"""Session 25: the W4A16 CUDA GEMV with warps sharing one row tile (kernels/w4a16_cuda.py SHARED_TILE, -DW4_KS)
against the launch config the runtime serves today (`default_config`: TUNED / DEFAULTS), per layer shape and M, by
the kernel table's rotate timing (compress.bench.kernel_timing.checked_call_us: checked against the reference and for
the same bytes on a second call first), with torch fp16 F.linear in the same process for the ratio.

Shapes: the kernel table's 8 Llama-3 layers plus the 8B decode step's fused q/k/v (6144 x 4096) and gate/up
(28672 x 4096). Arms: "cur" (the served config), then every SHARED_TILE build x waves x cluster reduction. The
fastest arm is timed again, and "cur" with it. Writes OUT_JSON (all arms) and OUT_PICKS (the fastest shared-tile arm
per shape where it beat "cur" by more than 2%, in COMPRESS_W4A16_PICKS form: {"N,K": {"bucket": [variant, waves,
cluster, false]}}).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s25/sweep.py OUT_JSON OUT_PICKS [M ...]
Environment: SWEEP_VARIANTS (default every SHARED_TILE build; "all": every build of w4a16_cuda.VARIANTS), SWEEP_WAVES
(0.5,1,2), SWEEP_CLUSTER (0,1: the cluster reduction off and on), SWEEP_SHAPES ("N,K;N,K").
Session 27 (H200 re-tune, bench/results/h200/kernels_s27/) added "all", SWEEP_CLUSTER and the two Qwen3-8B MLP shapes.
Session 28: "cur" is the config served on this GPU (`default_config` with the GPU's name: TUNED_BY_GPU first); before,
it was TUNED's (the H100's) everywhere.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda
from kernels.cases import LLAMA_SHAPES, make_int4
from kernels.w4a16 import w4a16_linear_ref

VARIANTS = [v for v in os.environ.get("SWEEP_VARIANTS", ",".join(w4a16_cuda.SHARED_TILE)).split(",") if v]
if VARIANTS == ["all"]:
    VARIANTS = sorted(w4a16_cuda.VARIANTS)
WAVES = tuple(float(w) for w in os.environ.get("SWEEP_WAVES", "0.5,1,2").split(","))
CLUSTER = tuple(bool(int(c)) for c in os.environ.get("SWEEP_CLUSTER", "0,1").split(","))
SHAPES = [(name, n, k) for name, n, k in LLAMA_SHAPES] + [("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096),
                                                         ("Qwen3 fused gate_up", 24576, 4096), ("Qwen3 down", 4096, 12288)]
if os.environ.get("SWEEP_SHAPES"):
    want = {tuple(int(v) for v in s.split(",")) for s in os.environ["SWEEP_SHAPES"].split(";")}
    SHAPES = [s for s in SHAPES if (s[1], s[2]) in want]


def main() -> None:
    out_json, out_picks = sys.argv[1], sys.argv[2]
    ms = [int(a) for a in sys.argv[3:]] or [1, 16]
    t0 = time.time()
    gpu = w4a16_cuda.gpu_name(torch.device("cuda"))
    cur_names = {w4a16_cuda.default_config(m, n, k, gpu)[0] for m in ms for _, n, k in SHAPES}
    w4a16_cuda.prebuild(torch.device("cuda"), sorted(set(VARIANTS) | cur_names))
    print(f"built {len(set(VARIANTS) | cur_names)} variants in {time.time() - t0:.0f} s", flush=True)
    rows, picks = [], {}
    for m in ms:
        bucket = str(next(b for b in sorted(w4a16_cuda.DEFAULTS) if m <= b))
        for label, n, k in SHAPES:
            p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
            x = torch.randn(m, k, device="cuda").half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
            fp16 = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), torch.randn(n, k, device="cuda").half())
            name, waves, cluster, bal = w4a16_cuda.default_config(m, n, k, gpu)

            def arm(nm, wv, cl, bl=False):
                return kt.checked_call_us(lambda q: w4a16_cuda._launch(x, q["qweight"], q["scales"], None, 128, name=nm,
                                                                       waves=wv, cluster=cl, balanced=bl), p, want)

            arms = {f"cur {name}/{waves}/{int(cluster)}/{int(bal)}": arm(name, waves, cluster, bal)}
            for nm, wv, cl in itertools.product(VARIANTS, WAVES, CLUSTER):
                arms[f"{nm}/{wv}/{int(cl)}"] = arm(nm, wv, cl)
            cur_key = next(iter(arms))
            best = min((a for a in arms if a != cur_key), key=lambda a: arms[a]["us"])
            nm, wv, cl = best.split("/")
            again = arm(nm, float(wv), bool(int(cl)))["us"]
            cur_again = arm(name, waves, cluster, bal)["us"]
            cur_us = min(arms[cur_key]["us"], cur_again)
            row = {"layer": label, "N": n, "K": k, "M": m, "fp16_us": fp16, "arms": arms, "best": best,
                   "best_again_us": again, "cur_again_us": cur_again}
            rows.append(row)
            if min(arms[best]["us"], again) < 0.98 * cur_us:
                picks.setdefault(f"{n},{k}", {})[bucket] = [nm, float(wv), bool(int(cl)), False]
            print(f"{label:18s} M={m:2d} fp16 {fp16:7.2f} | {cur_key:28s} {arms[cur_key]['us']:7.2f} / {cur_again:7.2f} us "
                  f"= {fp16 / cur_us:.3f}x | best {best:20s} {arms[best]['us']:7.2f} / {again:7.2f} us = "
                  f"{fp16 / min(arms[best]['us'], again):.3f}x  [{time.time() - t0:.0f} s]", flush=True)
            bad = [a for a, v in arms.items() if v["us"] == float("inf")]
            if bad:
                print(f"    NOT TIMED (wrong, unequal or raised): {[(a, arms[a]) for a in bad][:4]}", flush=True)
            json.dump(rows, open(out_json, "w"), indent=1)
            json.dump(picks, open(out_picks, "w"), indent=1)
    for m in ms:
        sel = [r for r in rows if r["M"] == m and (r["N"], r["K"]) in {(n, k) for _, n, k in LLAMA_SHAPES}]
        if not sel:
            continue
        cur = statistics.median(r["fp16_us"] / min(next(iter(r["arms"].values()))["us"], r["cur_again_us"]) for r in sel)
        new = statistics.median(r["fp16_us"] / min(min(v["us"] for v in r["arms"].values()), r["best_again_us"],
                                                   r["cur_again_us"]) for r in sel)
        print(f"M={m}: median over the 8 table shapes, fp16 / ours: served {cur:.3f}x, best of served + shared tiles "
              f"{new:.3f}x", flush=True)


if __name__ == "__main__":
    main()
