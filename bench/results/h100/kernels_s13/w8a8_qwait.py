"""Session 13: W8A8 at 3..16 tokens with the activation quantizer launched under programmatic dependent launch
(config key "qwait": it waits for the kernel before it, which does not trigger early), against the served config.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s13/w8a8_qwait.py OUT
Per Llama-3 shape and M in QW_MS, one process, compress.bench.kernel_timing.call_ms (rotate): torch fp16 F.linear, the
config served before this session (kernels.w8a8._config without "qwait") and the same with "qwait" (above 16 tokens,
where the GEMM had no PDL: with "pdl" 2048, then also "qwait"), alternated twice (the faster of each is kept); each
call checked against w8a8_linear_ref first. -> OUT/w8a8_qwait.json and the median speedup over fp16 per M and arm.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels.cases import make_w8a8, rel_err
from kernels.w8a8 import _config, _launch, w8a8_linear_ref

SHAPES = [("8B q/o_proj", 4096, 4096), ("8B k/v_proj", 1024, 4096), ("8B gate/up_proj", 14336, 4096),
          ("8B down_proj", 4096, 14336), ("70B q/o_proj", 8192, 8192), ("70B k/v_proj", 1024, 8192),
          ("70B gate/up_proj", 28672, 8192), ("70B down_proj", 8192, 28672)]
MS = tuple(int(v) for v in os.environ.get("QW_MS", "4,8,16").split(","))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    rows = []
    for m in MS:
        for label, n, k in SHAPES:
            wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
            w16 = torch.randn(n, k, device="cuda").half()
            x = torch.randn(m, k, device="cuda").half()
            want = w8a8_linear_ref(x, wq, ws)
            r = {"label": label, "n": n, "k": k, "m": m, "cfg": _config(m),
                 "fp16": 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w16)}
            cfg0 = {kk: v for kk, v in _config(m).items() if kk != "qwait"}  # "served": the config before session 13
            if m > 16:  # no PDL there yet: the GEMM behind the quantizer under PDL, with and without qwait
                arms = {"served": cfg0, "pdl": cfg0 | {"pdl": 2048}, "qwait": cfg0 | {"pdl": 2048, "qwait": True}}
            else:
                arms = {"served": cfg0, "qwait": cfg0 | {"qwait": True}}
            for _ in range(2):
                for key, cfg in arms.items():
                    call = lambda p, c=cfg: _launch(x, p[0], p[1], c)  # noqa: E731
                    ok = rel_err(call((wq, ws)), want) < 3e-3
                    us = 1000 * kt.call_ms(call, (wq, ws)) if ok else float("inf")
                    r[key] = min(r.get(key, float("inf")), us)
            rows.append(r)
            print(f"[{time.time() - t0:5.1f} s] {label} M={m}: fp16 {r['fp16']:.2f} | "
                  + " | ".join(f"{a} {r[a]:.2f}" for a in arms) + f" ({r['served'] / r['qwait']:.3f}x)", flush=True)
            with open(f"{out}/w8a8_qwait.json", "w") as f:
                json.dump(rows, f, indent=1, default=str)
            del wq, ws, w16
            torch.cuda.empty_cache()
    for m in MS:
        rs = [r for r in rows if r["m"] == m]
        arms = [a for a in ("served", "pdl", "qwait") if a in rs[0]]
        print(f"M={m}: median over fp16 " + ", ".join(f"{a} {statistics.median(r['fp16'] / r[a] for r in rs):.3f}x"
                                                   for a in arms), flush=True)


if __name__ == "__main__":
    main()
