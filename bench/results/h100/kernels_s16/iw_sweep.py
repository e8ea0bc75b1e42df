"""Session 16: variants of the one-token 2:4 int8 GEMV (kernels/sparse24.py `_sparse24_gemv_iw_kernel`) merged over
what serves each shape (`_config(1, True, n, k)`, the shape rule), against the dense W8A8 one-token paths, on the 8
Llama-3 shapes. Each arm is timed by compress.bench.kernel_timing.checked_call_us (rotating weights, checked against
the reference, the activation quantization inside every call), twice in alternation, the faster kept.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s16/iw_sweep.py OUT
(env IW_VARIANTS='{"name": {config keys}}') -> OUT/iw_sweep.json and one line per shape.
IW_DTYPE=fp16: fp16 values instead, against dense fp16 F.linear; "served" is `_config(1)` and the variants are whole
configs (e.g. the meta-word fp16 GEMV `_sparse24_gemv_fw_kernel`, kind "prmtw" with BN / BQ).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (1024, 8192), (28672, 8192),
          (8192, 28672)]
VARIANTS = json.loads(os.environ.get("IW_VARIANTS", '{"evict_off": {"evict": ""}}'))
FP16 = os.environ.get("IW_DTYPE", "int8") == "fp16"


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    from compress.bench import kernel_timing as kt
    from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8
    from kernels.cases import make_sparse24, make_w8a8
    from kernels.sparse24 import _config, _launch, sparse24_linear_ref, sparse24_w8a8_linear_ref
    from kernels.w8a8 import w8a8_linear, w8a8_linear_ref

    rows = []
    for n, k in SHAPES:
        x = torch.randn(1, k, device="cuda").half()
        w16 = torch.randn(n, k, device="cuda").half()
        r = {"n": n, "k": k, "t": {}, "dense": {}}
        r["fp16"] = kt.call_ms(lambda w_: F.linear(x, w_), w16) * 1000
        if FP16:
            p = make_sparse24(n, k, torch.float16, "cuda", seed=n + k)
            r["served"] = _config(1)
            r["dense"]["fp16"] = r["fp16"]
            want = sparse24_linear_ref(x, p["values"], p["meta"])
            arms = {"served": r["served"]} | VARIANTS
        else:
            wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
            p = make_sparse24(n, k, torch.int8, "cuda", seed=n + k)
            r["served"] = _config(1, True, n, k)
            dref = w8a8_linear_ref(x, wq, ws)
            for c in GEMV_I8_CONFIGS:
                r["dense"]["gemv_i8_%dx%d_w%d" % c] = kt.checked_call_us(
                    lambda q, c=c: gemv_i8(x, None, q[0], q[1], x.dtype, c), (wq, ws), dref, tol=3e-3)["us"]
            r["dense"]["w8a8"] = kt.checked_call_us(lambda q: w8a8_linear(x, q[0], q[1]), (wq, ws), dref,
                                                    tol=3e-3)["us"]
            want = sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])
            arms = {"served": r["served"]} | {name: dict(r["served"], **v) for name, v in VARIANTS.items()}
            del wq, ws
        for _ in range(2):
            for name, cfg in arms.items():
                got = kt.checked_call_us(lambda q, c=cfg: _launch(x, q["values"], q["meta"], q.get("w_scale"), c), p,
                                         want, tol=3e-3)
                if got.get("error"):
                    print(f"  {name}: {got['error'][:150]}", flush=True)
                r["t"][name] = min(r["t"].get(name, float("inf")), got["us"])
        dense = min(r["dense"].values())
        r["over_dense"] = {a: dense / us for a, us in r["t"].items()}
        rows.append(r)
        print(f"[{time.time() - t0:5.1f} s] {n}x{k}: fp16 {r['fp16']:.1f} dense {dense:.1f} | "
              + " ".join(f"{a} {us:.2f}" for a, us in r["t"].items()), flush=True)
        with open(f"{out}/iw_sweep.json", "w") as f:
            json.dump(rows, f, indent=1, default=str)
        del p, w16
        torch.cuda.empty_cache()
    med = {a: statistics.median(r["over_dense"][a] for r in rows) for a in rows[0]["t"]}
    print(f"median over dense {'fp16' if FP16 else 'W8A8'}: " + " ".join(f"{a} {v:.3f}" for a, v in sorted(med.items(), key=lambda t: -t[1])),
          flush=True)


if __name__ == "__main__":
    main()
