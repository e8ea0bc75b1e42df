"""Session 15: the 2:4 tensor-core kernel's PRMT widening and configs end to end, in one process: `compress bench
e2e`'s run_e2e on synthetic Llama-3-8B 2:4 fp16 and 2:4 int8 (FORMATS, default "sparse24,w8a8-sparse24"), arms in
turn (ARMS, default "old,new,old,new"): "old" serves session 14's rules (kernels.sparse24._config at 4824f76: the fused
PRMT GEMV for int8 up to 4 tokens, the tc kernel with the compare-and-select widening to 64 tokens, the expand kernel
above), "new" this tree's. Workloads (WORKLOADS): medium_batch (batch 8), base (32), high_concurrency (64),
prefill_bound (one 2048-token prompt). The runtime's path table is cleared before every arm, so each arm's layers take
what is fastest with that arm's kernels (densify + the dense GEMM, the CUDA mma.sp GEMV for int8, ...), as a user's
would.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s15/e2e_sp24_ab.py OUT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import triton

from compress.runtime import paths
from kernels import sparse24

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels_s12"))
from e2e_ab import run_arms  # noqa: E402  (session 12's A/B loop: arms in turn in one process, then the TPOT table)

NEW = sparse24._config


def _old(m: int, int8: bool = False) -> dict:
    """kernels.sparse24._config of session 14 (4824f76), its tc configs on the compare-and-select widening."""
    if m <= 4 and int8:
        return {"kind": "prmt", "BN": 32, "BW": 16, "num_warps": 8, "waves": 2, "fused": True}
    if m == 1:
        return {"kind": "prmt", "BN": 16, "BW": 8, "num_warps": 4, "waves": 4}
    if m <= 64:
        cfg = {"kind": "tc", "BN": 64, "BW": 8, "num_warps": 4, "num_stages": 3, "fit": 1, "expand": "select",
               "BM": max(16, triton.next_power_of_2(m))}
        if m > 32 and not int8:
            return dict(cfg, BN=128, num_warps=8, fit=2)
        return dict(cfg, fit=2) if m > 4 else cfg
    return sparse24._mma_config(m)


def _set_arm(arm: str) -> None:
    sparse24._config = {"old": _old, "new": NEW}[arm]
    paths.TABLE.choice.clear()
    paths.TABLE.timings.clear()


def main():
    os.environ.setdefault("WORKLOADS", "medium_batch,base,high_concurrency,prefill_bound")
    got = run_arms(sys.argv[1], "e2e_sp24_ab", os.environ.get("ARMS", "old,new,old,new").split(","), _set_arm,
                   os.environ.get("FORMATS", "sparse24,w8a8-sparse24"))
    print("\n| workload | format | arm | TPOT ms / TTFT ms, per arm in turn |")
    print("|---|---|---|---|")
    for wl in dict.fromkeys(r["workload"] for r in got):
        for fmt in dict.fromkeys(r["model"] for r in got):
            for arm in dict.fromkeys(r["arm"] for r in got):
                rs = [r for r in got if r["arm"] == arm and r["workload"] == wl and r["model"] == fmt and r["stats"]]
                if rs:
                    print(f"| {wl} (batch {rs[0]['batch']}) | {fmt} | {arm} | "
                          + " / ".join(f"{r['stats']['tpot_ms']['mean']:.3f} / {r['stats']['ttft_ms']['mean']:.1f}" for r in rs)
                          + " |")


if __name__ == "__main__":
    main()
