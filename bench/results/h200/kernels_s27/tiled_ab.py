"""Session 27: the row-tiled weight order (compress/packing/int4_tiled.py, kernels/w4a16_cuda.py TILED) against the
plain layout, per layer shape and M, by the kernel table's rotate timing (kernel_timing.checked_call_us: checked
against the reference and for the same bytes on a second call first), torch fp16 F.linear in the same process.

Arms per shape: "served" (the runtime's config today, plain layout), then every TILED build and its plain build at
waves 0.5 / 1 / 2 (and the cluster reduction on and off above 8 tokens). The fastest tiled and the fastest plain arm
are timed a second time. Writes OUT_JSON (every arm) and prints one line per shape and the medians over the kernel
table's 8 Llama-3 shapes of fp16 / ours for the served config, the best plain and the best tiled arm.

Usage (repository root, GPU machine, at f89e048: the tiled builds were taken out after this A/B):
    python3 bench/results/h200/kernels_s27/tiled_ab.py OUT_JSON [M ...]
Environment: AB_SHAPES ("N,K;N,K": only those shapes).
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
from compress.packing.int4_tiled import tile_rows
from kernels import w4a16_cuda
from kernels.cases import LLAMA_SHAPES, make_int4
from kernels.w4a16 import w4a16_linear_ref

SHAPES = [(name, n, k) for name, n, k in LLAMA_SHAPES] + [("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096),
                                                         ("Qwen3 fused gate_up", 24576, 4096), ("Qwen3 down", 4096, 12288)]
if os.environ.get("AB_SHAPES"):
    want_shapes = {tuple(int(v) for v in s.split(",")) for s in os.environ["AB_SHAPES"].split(";")}
    SHAPES = [s for s in SHAPES if (s[1], s[2]) in want_shapes]


def main() -> None:
    out_json = sys.argv[1]
    ms = [int(a) for a in sys.argv[2:]] or [1, 16]
    t0 = time.time()
    names = sorted(set(w4a16_cuda.TILED) | set(w4a16_cuda.TILED.values())
                   | {w4a16_cuda.default_config(m, n, k)[0] for m in ms for _, n, k in SHAPES})
    w4a16_cuda.prebuild(torch.device("cuda"), names)
    print(f"{len(names)} builds ready in {time.time() - t0:.0f} s", flush=True)
    rows = []
    for m in ms:
        for label, n, k in SHAPES:
            p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
            pt = dict(p, qweight=tile_rows(p["qweight"]))
            x = torch.randn(m, k, device="cuda").half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
            fp16 = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), torch.randn(n, k, device="cuda").half())

            def arm(weights, nm, wv, cl, bl=False):
                return kt.checked_call_us(lambda q: w4a16_cuda._launch(x, q["qweight"], q["scales"], None, 128, name=nm,
                                                                       waves=wv, cluster=cl, balanced=bl), weights, want)

            name, waves, cluster, bal = w4a16_cuda.default_config(m, n, k)
            arms = {f"served {name}/{waves}/{int(cluster)}/{int(bal)}": arm(p, name, waves, cluster, bal)}
            for tname, wv, cl in itertools.product(sorted(w4a16_cuda.TILED), (0.5, 1.0, 2.0), (False, True) if m > 8 else (False,)):
                arms[f"{tname}/{wv}/{int(cl)}"] = arm(pt, tname, wv, cl)
                plain = w4a16_cuda.TILED[tname]
                arms[f"{plain}/{wv}/{int(cl)}"] = arm(p, plain, wv, cl)
            served = next(iter(arms))
            best_t = min((a for a in arms if a.split("/")[0] in w4a16_cuda.TILED), key=lambda a: arms[a]["us"])
            best_p = min((a for a in arms if a.split("/")[0] not in w4a16_cuda.TILED), key=lambda a: arms[a]["us"])
            again = {}
            for a in (best_t, best_p):
                nm, wv, cl = a.split("/")[:3] if not a.startswith("served") else (name, waves, int(cluster))
                again[a] = arm(pt if nm in w4a16_cuda.TILED else p, nm, float(wv), bool(int(cl)),
                               bal if a.startswith("served") else False)["us"]
            row = {"layer": label, "N": n, "K": k, "M": m, "fp16_us": fp16, "arms": arms, "best_tiled": best_t,
                   "best_plain": best_p, "again_us": again}
            rows.append(row)
            tus, pus = min(arms[best_t]["us"], again[best_t]), min(arms[best_p]["us"], again[best_p])
            print(f"{label:19s} M={m:2d} fp16 {fp16:7.2f} | {served:26s} {arms[served]['us']:7.2f} | plain {best_p:18s} "
                  f"{pus:7.2f} | tiled {best_t:19s} {tus:7.2f} us = {fp16 / tus:.3f}x ({100 * (tus / pus - 1):+.1f}% vs "
                  f"plain)  [{time.time() - t0:.0f} s]", flush=True)
            bad = [a for a, v in arms.items() if v["us"] == float("inf")]
            if bad:
                print(f"    NOT TIMED (wrong, unequal or raised): {[(a, arms[a]) for a in bad][:4]}", flush=True)
            json.dump(rows, open(out_json, "w"), indent=1)
    table = {(n, k) for _, n, k in LLAMA_SHAPES}
    for m in ms:
        sel = [r for r in rows if r["M"] == m and (r["N"], r["K"]) in table]
        if not sel:
            continue
        med = lambda f: statistics.median(r["fp16_us"] / f(r) for r in sel)  # noqa: E731
        served = med(lambda r: next(iter(r["arms"].values()))["us"])
        plain = med(lambda r: min(r["arms"][r["best_plain"]]["us"], r["again_us"][r["best_plain"]]))
        tiled = med(lambda r: min(r["arms"][r["best_tiled"]]["us"], r["again_us"][r["best_tiled"]]))
        print(f"M={m}: median over the {len(sel)} table shapes, fp16 / ours: served {served:.3f}x, best plain "
              f"{plain:.3f}x, best tiled {tiled:.3f}x", flush=True)


if __name__ == "__main__":
    main()
