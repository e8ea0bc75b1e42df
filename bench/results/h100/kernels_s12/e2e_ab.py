"""Session 12: what the new W4A16 tiles at 16..64 tokens change end to end, in one process: `compress bench e2e`'s
run_e2e on synthetic Llama-3-8B W4A16 at the batched decode workloads (medium_batch 8, base 32, high_concurrency 64),
once with session 11's Triton tables (its SHAPE_TUNED, its M table, the old split-K tail) put back into
kernels.w4a16, once with this tree's, in turn (ARMS, default "old,new,old,new").

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s12/e2e_ab.py OUT
The runtime's path table times the CUDA GEMV against the Triton launcher per layer and M bucket at each model's
load, so an arm's tables reach the decode step wherever the Triton launcher wins, as they would for a user.
"""

from __future__ import annotations

import json
import os
import sys
import time

from compress.bench.e2e import run_e2e
from kernels import w4a16


def _tc(bm, bn, nb, w, st, waves=None):
    cfg = {"kind": "tc", "BM": bm, "BN": bn, "NB": nb, "num_warps": w, "num_stages": st, "round": 1}
    return cfg | ({"waves": waves} if waves else {})


# git show 986dfa8:kernels/w4a16.py (session 11), with "round": 1 (the split-K tail of then)
OLD_SHAPE_TUNED = {
    (4096, 4096): {32: _tc(32, 128, 2, 8, 3)},
    (1024, 4096): {16: _tc(16, 64, 4, 4, 3), 32: _tc(32, 64, 4, 4, 3), 64: _tc(64, 128, 2, 8, 3)},
    (14336, 4096): {16: _tc(16, 128, 2, 8, 3, 4.0), 32: _tc(32, 128, 2, 8, 3, 4.0), 64: _tc(64, 128, 2, 8, 3)},
    (4096, 14336): {32: _tc(32, 128, 2, 8, 3), 64: _tc(64, 128, 2, 8, 3)},
    (8192, 8192): {16: _tc(16, 128, 2, 8, 3, 4.0), 32: _tc(32, 128, 2, 8, 3, 4.0), 64: _tc(64, 128, 1, 8, 2, 4.0)},
    (1024, 8192): {16: _tc(16, 128, 4, 8, 3), 32: _tc(32, 128, 2, 8, 3), 64: _tc(64, 64, 2, 4, 3)},
    (28672, 8192): {32: _tc(32, 128, 2, 8, 3), 64: _tc(64, 128, 2, 8, 3)},
    (8192, 28672): {16: _tc(16, 128, 2, 8, 3, 4.0), 32: _tc(32, 128, 2, 8, 3, 4.0), 64: _tc(64, 128, 2, 8, 3)},
}
NEW_SHAPE_TUNED, NEW_CONFIG = w4a16.SHAPE_TUNED, w4a16._config


def old_config(m: int, n: int, k: int | None = None) -> dict:
    if k is not None and 1 < m <= 64:
        got = OLD_SHAPE_TUNED.get((n, k), {}).get(16 if m <= 16 else (32 if m <= 32 else 64))
        if got:
            return dict(got)
    if m == 1:
        return {"kind": "tc", "BM": 16, "BN": 64, "num_warps": 4, "num_stages": 2, "NB": 4, "round": 1}
    if m <= 16:
        return {"kind": "tc", "BM": 16, "BN": 128, "num_warps": 8, "num_stages": 3, "NB": 2, "round": 1}
    if m <= 64:
        return {"kind": "tc", "BM": 64, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 1, "round": 1}
    return {"kind": "dequant"}


def run_arms(out: str, name: str, arms: list[str], set_arm, formats: str = "w4a16") -> list[dict]:
    """run_e2e on synthetic Llama-3-8B once per arm, in turn (set_arm(arm) first), at WORKLOADS; the results so far go
    to OUT/<name>.json after every arm. No arm starts after AB_LIMIT_S seconds. Then the TPOT table."""
    os.makedirs(out, exist_ok=True)
    workloads = os.environ.get("WORKLOADS", "medium_batch,base,high_concurrency")
    limit = float(os.environ.get("AB_LIMIT_S", "1e9"))
    t0 = time.time()
    got = []
    for i, arm in enumerate(arms):
        if i and time.time() - t0 > limit:
            print(f"stopped before arm {i} ({arm}): {time.time() - t0:.0f} s > AB_LIMIT_S", flush=True)
            break
        set_arm(arm)
        doc = run_e2e(synthetic="llama-3-8b", formats=formats, workloads=workloads, runs=3,
                      output=None, command=f"{name} arm {i} {arm}")
        for r in doc["results"]:
            got.append({"arm": arm, "i": i, **r})
        with open(f"{out}/{name}.json", "w") as f:
            json.dump(got, f, indent=1, default=str)
        print(f"[{time.time() - t0:6.1f} s] arm {i} {arm} done", flush=True)
    print("\n| workload | arm | TPOT ms, mean of 3 runs, per arm in turn | output tok/s |")
    print("|---|---|---|---|")
    for wl in dict.fromkeys(r["workload"] for r in got):
        for arm in dict.fromkeys(r["arm"] for r in got):
            rs = [r for r in got if r["arm"] == arm and r["workload"] == wl and r["stats"]]
            if rs:
                tpot = " / ".join(f"{r['stats']['tpot_ms']['mean']:.3f}" for r in rs)
                tps = " / ".join(f"{r['stats']['output_tps']['mean']:.0f}" for r in rs)
                print(f"| {wl} (batch {rs[0]['batch']}) | {arm} | {tpot} | {tps} |")
    return got


def _set_tables(arm: str) -> None:
    w4a16.SHAPE_TUNED, w4a16._config = (OLD_SHAPE_TUNED, old_config) if arm == "old" else (NEW_SHAPE_TUNED, NEW_CONFIG)


def main():
    run_arms(sys.argv[1], "e2e_ab", os.environ.get("ARMS", "old,new,old,new").split(","), _set_tables)


if __name__ == "__main__":
    main()
