"""Session 17: weight-only int8 on 2:4 weights (kernels/sparse24.py `sparse24_w8a16_linear`, the tensor-core kernel
`_sparse24_tc_kernel` with W8A16) against the runtime's dense W8A16 layer (every path it offers, timed and checked:
compress.bench.kernel_suites.w8a16_dense) and torch fp16 F.linear, on the 8 Llama-3 shapes.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s17/w8a16_sweep.py OUT
Env: W16_MS (default 1,2,4,8,16,32,64), W16_VARIANTS='{"name": {config keys}}' merged over the served config
(`_config_w8a16(m)`), W16_SHAPES="NxK,...". Each 2:4 arm is timed by compress.bench.kernel_timing.checked_call_us
(rotating weights, checked against `sparse24_w8a16_linear_ref`), twice in alternation, the faster kept.
-> OUT/w8a16_sweep.json and one line per (shape, M).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (1024, 8192), (28672, 8192),
          (8192, 28672)]
if os.environ.get("W16_SHAPES"):
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["W16_SHAPES"].split(",")]
MS = tuple(int(v) for v in os.environ.get("W16_MS", "1,2,4,8,16,32,64").split(","))
VARIANTS = json.loads(os.environ.get("W16_VARIANTS", "{}"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    from compress.bench import kernel_timing as kt
    from compress.bench.kernel_suites import w8a16_dense
    from kernels.cases import make_sparse24
    from kernels.sparse24 import _config_w8a16, sparse24_w8a16_linear_ref, sparse24_w8a16_linear_tiled

    rows = []
    for n, k in SHAPES:
        p = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        w16 = torch.randn(n, k, device="cuda").half()
        for m in MS:
            x = torch.randn(m, k, device="cuda").half()
            want = sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
            r = {"n": n, "k": k, "m": m, "served_cfg": _config_w8a16(m, n, k), "t": {}}
            r["fp16"] = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w16)
            d = w8a16_dense(n, k, m, "rotate")
            r["dense_pick"], r["dense_path"] = 1000 * d["ms"], d["path"]
            r["dense_best"], r["dense_best_path"] = 1000 * d["best_ms"], d["best_path"]
            r["dense_paths"] = {key: 1000 * v for key, v in d["paths"].items()}
            arms = {"served": r["served_cfg"]} | {key: r["served_cfg"] | v for key, v in VARIANTS.items()}
            for _ in range(2):
                for key, cfg in arms.items():
                    got = kt.checked_call_us(
                        lambda q, c=cfg: sparse24_w8a16_linear_tiled(x, q["values"], q["meta"], q["w_scale"], c), p, want,
                        tol=3e-3)
                    r["t"][key] = min(r["t"].get(key, float("inf")), got["us"])
            rows.append(r)
            best = min(r["t"], key=r["t"].get)
            print(f"[{time.time() - t0:5.1f} s] {n}x{k} M={m}: fp16 {r['fp16']:.2f} | dense W8A16 pick {r['dense_pick']:.2f} "
                  f"({r['dense_path']}) best {r['dense_best']:.2f} | 2:4 " + " ".join(f"{a} {us:.2f}" for a, us in r["t"].items())
                  + f" | over dense best: served {r['dense_best'] / r['t']['served']:.3f}x, best {best} "
                  f"{r['dense_best'] / r['t'][best]:.3f}x", flush=True)
            with open(f"{out}/w8a16_sweep.json", "w") as f:
                json.dump(rows, f, indent=1)
        del p, w16


if __name__ == "__main__":
    main()
