"""Session 13: the one W4A16 row still slower than fp16 up to 64 tokens (70B k/v, 1024 x 8192, at 64 tokens; and 8B
k/v beside it), re-swept with the tiles launched under PDL (this session's launch above 32 tokens): session 12's
64-token tiles (bench/results/h100/kernels_s12/sweep.py TILES[64]) x split counts, each with {"pdl": 0}.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s13/kv_sweep.py OUT
All by compress.bench.kernel_timing.call_ms (rotate), torch fp16 F.linear in the same process; every candidate checked
against w4a16_linear_ref (output poisoned with NaN) and for the same bytes twice. -> OUT/kv_sweep.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels_s12"))
from sweep import TILES  # noqa: E402

SHAPES = [("70B k/v_proj", 1024, 8192), ("8B k/v_proj", 1024, 4096)]
M = int(os.environ.get("KV_M", "64"))
MAX_GRID = 300
LAUNCH = {"pdl": 0}


def _cands(n, k):
    out = []
    for tile in TILES[M]:
        tiles = -(-n // tile["BN"]) * -(-M // tile["BM"])
        steps = -(-(k // 128) // tile["NB"])
        for split in range(2, steps + 1):
            per = -(-steps // split)
            split = -(-steps // per)
            cfg = tile | LAUNCH | {"split": split}
            if tiles * split <= MAX_GRID and cfg not in out:
                out.append(cfg)
    return out


def _warm_one(cfg):
    from kernels.cases import make_int4
    from kernels.w4a16 import _launch
    p = make_int4(1024, 4096, 128, True, torch.float16, "cuda", seed=1)
    x = torch.randn(M, 4096, device="cuda").half()
    try:
        for split in (1, 2, (4096 // 128) // cfg["NB"]):
            _launch(x, p["qweight"], p["scales"], None, 128, cfg | {"split": split})
        torch.cuda.synchronize()
        return "ok"
    except Exception as e:
        return f"FAILED {str(e)[:100]}"


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    import multiprocessing as mp
    tiles = {json.dumps(t | LAUNCH, sort_keys=True): t | LAUNCH for t in TILES[M]}
    with ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
        print(f"[{time.time() - t0:5.1f} s] warm: {list(pool.map(_warm_one, tiles.values()))}", flush=True)
    from compress.bench import kernel_timing as kt
    from kernels.cases import make_int4
    from kernels.w4a16 import _config, _launch, w4a16_linear_ref
    rows = []
    for label, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w = torch.randn(n, k, device="cuda").half()
        x = torch.randn(M, k, device="cuda").half()
        want = w4a16_linear_ref(x, p["qweight"], p["scales"])

        def timed(cfg):
            return kt.checked_call_us(lambda p_: _launch(x, p_["qweight"], p_["scales"], None, 128, cfg), p, want)["us"]

        fp16 = lambda: 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w)  # noqa: E731
        r = {"label": label, "n": n, "k": k, "m": M, "served": _config(M, n, k), "fp16": [fp16()]}
        r["served_us"] = [timed(r["served"])]
        r["cands"] = [{"cfg": c, "us": timed(c)} for c in _cands(n, k)]
        best = sorted(r["cands"], key=lambda c: c["us"])[:3]
        for c in best:  # the three fastest again, alternating with fp16 and the served config
            c["again"] = [timed(c["cfg"]) for _ in range(2)]
            r["fp16"].append(fp16())
            r["served_us"].append(timed(r["served"]))
        r["best"] = best
        rows.append(r)
        print(f"[{time.time() - t0:5.1f} s] {label} M={M}: fp16 {r['fp16']} | served {r['served_us']} | "
              f"{len(r['cands'])} cands; best: " + "; ".join(f"{json.dumps(c['cfg'])} {c['us']:.2f} again {c['again']}"
                                                            for c in best), flush=True)
        with open(f"{out_dir}/kv_sweep.json", "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
