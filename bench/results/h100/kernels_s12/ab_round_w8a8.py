"""Session 12: the split-K tail's four partials in flight (kernels._common.splitk_epilogue ROUND) on the W8A8 GEMM,
whose M = 3..16 grid splits K (kernels.w8a8._config): ROUND 1 (the tail before) against 4, same process.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s12/ab_round_w8a8.py OUT
Per Llama-3 shape of the kernels table and M in AB_MS: torch fp16 F.linear, then kernels.w8a8._launch (the quantizer
included) with the M's default config and round 1 / 4, alternated three times; each checked first against
w8a8_linear_ref and for the same bytes twice. All by compress.bench.kernel_timing.call_ms (rotate).
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
from kernels.cases import LLAMA_SHAPES, rel_err
from kernels.w8a8 import _config, _launch, w8a8_linear_ref

OUT = sys.argv[1]
MS = tuple(int(v) for v in os.environ.get("AB_MS", "4,8,16").split(","))


def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    rows = []
    print(f"device {kt.device_description()}", flush=True)
    for label, n, k in LLAMA_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(n + k)
        wq = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8, generator=g)
        ws = torch.rand(n, device="cuda", generator=g) * 1e-2 + 1e-3
        w16 = torch.randn(n, k, device="cuda").half()
        for m in MS:
            x = torch.randn(m, k, device="cuda").half()
            want = w8a8_linear_ref(x, wq, ws)
            r = {"label": label, "n": n, "k": k, "m": m, "cfg": _config(m),
                 "fp16_us": 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w16), "us": {"1": [], "4": []}}
            for rnd in (1, 4):
                call = lambda w_, rnd=rnd: _launch(x, w_[0], w_[1], _config(m) | {"round": rnd})  # noqa: E731
                out = call((wq, ws))
                r[f"err{rnd}"] = rel_err(out, want)
                r[f"same{rnd}"] = bool(torch.equal(out, call((wq, ws))))
            r["bits_equal_1_4"] = bool(torch.equal(_launch(x, wq, ws, _config(m) | {"round": 1}),
                                                   _launch(x, wq, ws, _config(m) | {"round": 4})))
            for _ in range(3):
                for rnd in (1, 4):
                    r["us"][str(rnd)].append(1000 * kt.call_ms(
                        lambda w_, rnd=rnd: _launch(x, w_[0], w_[1], _config(m) | {"round": rnd}), (wq, ws)))
            rows.append(r)
            a, b = statistics.median(r["us"]["1"]), statistics.median(r["us"]["4"])
            print(f"[{time.time() - t0:6.1f} s] {label} M={m}: fp16 {r['fp16_us']:.2f} | round 1 {a:.2f} | round 4 "
                  f"{b:.2f} ({a / b:.3f}x) | err {r['err4']:.1e} same {r['same4']} bits 1 == 4 {r['bits_equal_1_4']}",
                  flush=True)
    with open(f"{OUT}/ab_round_w8a8.json", "w") as f:
        json.dump(rows, f, indent=1, default=str)
    for m in MS:
        sub = [r for r in rows if r["m"] == m]
        s1 = statistics.median(r["fp16_us"] / statistics.median(r["us"]["1"]) for r in sub)
        s4 = statistics.median(r["fp16_us"] / statistics.median(r["us"]["4"]) for r in sub)
        print(f"M={m}: median speedup over fp16, round 1 {s1:.3f}x, round 4 {s4:.3f}x")


if __name__ == "__main__":
    main()
