"""Session 13: the W8A8 GEMM's tiles at 4 / 8 / 16 tokens, re-swept now that its quantizer launches under PDL
("qwait"), on the rows in the middle of the 1.8x target's median (8B gate/up, 8B down) and the one just above it
(70B q/o). Session 8's grid rule puts 8B gate/up on 224 programs of 64 rows (two waves at one program per SM).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s13/w8a8_sweep.py OUT
Per shape and M: torch fp16 F.linear, the served config and each variant below (twice, alternating, the faster
kept), all through kernels.w8a8._launch (quantizer included) by compress.bench.kernel_timing.checked_call_us.
-> OUT/w8a8_sweep.json and one line per row.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F

SHAPES = [("8B gate/up_proj", 14336, 4096), ("8B down_proj", 4096, 14336), ("70B q/o_proj", 8192, 8192)]
MS = tuple(int(v) for v in os.environ.get("W8_MS", "4,8,16").split(","))
VARIANTS = {"bn128": {"BN": 128}, "bn128w8": {"BN": 128, "num_warps": 8}, "bn32": {"BN": 32}, "pf8k": {"pdl": 8192},
            "pf512": {"pdl": 512}, "fit2": {"fit": 2}, "bk128": {"BK": 128}, "bk512": {"BK": 512, "num_stages": 3},
            "st3": {"deep": 0, "num_stages": 3}, "w8": {"num_warps": 8}}
# Call 9: W8_SHAPES="NxK,..." and W8_VARIANTS='{"name": {config keys}}' replace the lists above
if os.environ.get("W8_SHAPES"):
    SHAPES = [(nk, int(nk.split("x")[0]), int(nk.split("x")[1])) for nk in os.environ["W8_SHAPES"].split(",")]
if os.environ.get("W8_VARIANTS"):
    VARIANTS = json.loads(os.environ["W8_VARIANTS"])


def _warm_one(job):
    cfg, m = job
    from kernels.cases import make_w8a8
    from kernels.w8a8 import _launch
    wq, ws = make_w8a8(1024, 4096, "cuda", seed=1)
    x = torch.randn(m, 4096, device="cuda").half()
    try:
        for split in (1, 2):
            _launch(x, wq, ws, cfg | {"split": split})
        torch.cuda.synchronize()
        return "ok"
    except Exception as e:
        return f"FAILED {json.dumps(cfg)} {str(e)[:100]}"


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    from kernels.w8a8 import _config
    import multiprocessing as mp
    jobs = {json.dumps(_config(m) | v, sort_keys=True): (_config(m) | v, m) for m in MS for v in [{}, *VARIANTS.values()]}
    with ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
        print(f"[{time.time() - t0:5.1f} s] warm: {list(pool.map(_warm_one, jobs.values()))}", flush=True)
    from compress.bench import kernel_timing as kt
    from kernels.cases import make_w8a8
    from kernels.w8a8 import _launch, w8a8_linear_ref
    rows = []
    for m in MS:
        for label, n, k in SHAPES:
            wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
            w16 = torch.randn(n, k, device="cuda").half()
            x = torch.randn(m, k, device="cuda").half()
            want = w8a8_linear_ref(x, wq, ws)
            r = {"label": label, "n": n, "k": k, "m": m, "served_cfg": _config(m), "t": {}}
            r["fp16"] = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w16)
            arms = {"served": _config(m)} | {key: _config(m) | v for key, v in VARIANTS.items()}
            for _ in range(2):
                for key, cfg in arms.items():
                    got = kt.checked_call_us(lambda p, c=cfg: _launch(x, p[0], p[1], c), (wq, ws), want, tol=3e-3)
                    r["t"][key] = min(r["t"].get(key, float("inf")), got["us"])
            rows.append(r)
            best = min(r["t"], key=r["t"].get)
            print(f"[{time.time() - t0:5.1f} s] {label} M={m}: fp16 {r['fp16']:.2f} | "
                  + " ".join(f"{key} {us:.2f}" for key, us in r["t"].items())
                  + f" | best {best} {r['fp16'] / r['t'][best]:.3f}x (served {r['fp16'] / r['t']['served']:.3f}x)", flush=True)
            with open(f"{out}/w8a8_sweep.json", "w") as f:
                json.dump(rows, f, indent=1, default=str)
            del wq, ws, w16
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
