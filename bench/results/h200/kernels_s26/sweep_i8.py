"""Session 26: the dense int8 CUDA GEMV with warps sharing one row tile (kernels/i8_gemv.py SHARED_TILE, -DI8_KS)
against the path the runtime's W8A8 layer serves today (its PathTable's pick among the Triton GEMM / GEMV paths,
timed as the kernel table times it: compress.bench.kernel_suites.w8a8_dense), per Llama-3 layer shape and M, with
torch fp16 F.linear in the same process for the ratio. Every arm runs the activation quantizer too (or the in-kernel
one at one token, as `w8a8_gemv` serves), is checked against kernels.w8a8.w8a8_linear_ref and for the same bytes on
a second call, then timed by the table's rotate timing (compress.bench.kernel_timing.checked_call_us).

Arms: the one-warp-a-tile default build (for reference) and every SHARED_TILE build x SWEEP_WAVES. The fastest arm is
timed again. Writes OUT_JSON (all arms) and OUT_PICKS ({"N,K": {"M": [variant, waves]}} where the fastest arm beat the
served path by more than 2% in both of its timings: the form of kernels/i8_gemv.py DENSE_TUNED).

The shared-tile builds were reverted after call 1 (they lost everywhere): run this at commit 49562b0, which has them.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s26/sweep_i8.py OUT_JSON OUT_PICKS [M ...]
Environment: SWEEP_VARIANTS (default: every SHARED_TILE build and DEFAULT_VARIANT), SWEEP_WAVES (0.5,1,2).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from compress.bench import kernel_suites, kernel_timing as kt
from kernels import cuda_build, i8_gemv
from kernels.cases import LLAMA_SHAPES, make_w8a8
from kernels.w8a8 import w8a8_linear_ref

VARIANTS = [v for v in os.environ.get("SWEEP_VARIANTS", ",".join([*i8_gemv.SHARED_TILE, i8_gemv.DEFAULT_VARIANT]))
            .split(",") if v]
WAVES = tuple(float(w) for w in os.environ.get("SWEEP_WAVES", "0.5,1,2").split(","))


def main() -> None:
    out_json, out_picks = sys.argv[1], sys.argv[2]
    ms = [int(a) for a in sys.argv[3:]] or [1, 2, 4, 8, 16]
    t0 = time.time()
    arch_code = cuda_build.arch(torch.device("cuda"))
    with ThreadPoolExecutor(len(VARIANTS)) as pool:
        list(pool.map(lambda nm: i8_gemv.compile_variant(arch_code, nm), VARIANTS))
    print(f"built {VARIANTS} in {time.time() - t0:.0f} s", flush=True)
    rows, picks = [], {}
    for label, n, k in LLAMA_SHAPES:
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        wf = torch.randn(n, k, device="cuda").half()
        for m in ms:
            x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).half()
            want = w8a8_linear_ref(x, wq, ws)
            fp16 = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), wf)
            served = kernel_suites.w8a8_dense(n, k, m, "rotate")
            cur_us = 1000 * served["ms"]

            def arm(nm, wv):
                return kt.checked_call_us(lambda w: i8_gemv._launch(x, w[0], w[1], None, name=nm, waves=wv), (wq, ws),
                                          want)

            arms = {f"{nm}/{wv}": arm(nm, wv) for nm in VARIANTS for wv in WAVES}
            best = min(arms, key=lambda a: arms[a]["us"])
            nm, wv = best.split("/")
            again = arm(nm, float(wv))["us"]
            row = {"layer": label, "N": n, "K": k, "M": m, "fp16_us": fp16, "served_path": served["path"],
                   "served_us": cur_us, "served_paths_ms": served["paths"], "arms": arms, "best": best,
                   "best_again_us": again}
            rows.append(row)
            if max(arms[best]["us"], again) < 0.98 * cur_us:
                picks.setdefault(f"{n},{k}", {})[str(m)] = [nm, float(wv)]
            print(f"{label:10s} M={m:2d} fp16 {fp16:7.2f} | served {served['path'][:34]:34s} {cur_us:7.2f} us = "
                  f"{fp16 / cur_us:.3f}x | best {best:14s} {arms[best]['us']:7.2f} / {again:7.2f} us = "
                  f"{fp16 / max(arms[best]['us'], again):.3f}x  [{time.time() - t0:.0f} s]", flush=True)
            bad = [a for a, v in arms.items() if v["us"] == float("inf")]
            if bad:
                print(f"    NOT TIMED (wrong, unequal or raised): {[(a, arms[a]) for a in bad][:4]}", flush=True)
            json.dump(rows, open(out_json, "w"), indent=1)
            json.dump(picks, open(out_picks, "w"), indent=1)
    for m in ms:
        sel = [r for r in rows if r["M"] == m]
        cur = statistics.median(r["fp16_us"] / r["served_us"] for r in sel)
        new = statistics.median(r["fp16_us"] / min(r["served_us"], max(r["arms"][r["best"]]["us"], r["best_again_us"]))
                                for r in sel)
        print(f"M={m}: median over the 8 shapes, fp16 / ours: served {cur:.3f}x, best of served + shared tiles "
              f"{new:.3f}x", flush=True)


if __name__ == "__main__":
    main()
