"""Session 14: the W8A8 GEMM's shape-chosen tiles above 16 tokens (kernels.w8a8._config_mid / _config_wide) end to
end, in one process: `compress bench e2e`'s run_e2e on synthetic Llama-3-8B W8A8, arms in turn (ARMS, default
"old,new,old,new"): "old" serves session 13's tables above 16 tokens (`_config_table`), "new" this tree's.
Workloads (WORKLOADS): base (batch 32: decode at 32 tokens, prefill 8192), high_concurrency (batch 64), prefill_bound
(one 2048-token prompt). The runtime's path table (kernel vs torch._int_mm per layer and M bucket) is cleared before
every arm, so each arm's layers take what is fastest with that arm's tiles, as a user's would.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s14/e2e_w8a8_ab.py OUT
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from compress.runtime import paths
from kernels import w8a8

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels_s12"))
from e2e_ab import run_arms  # noqa: E402  (session 12's A/B loop: arms in turn in one process, then the TPOT table)

NEW = w8a8._config_builtin


def _old(m: int, n: int = 0, k: int = 0, sms: int = 132) -> dict:
    return w8a8._config_s8(m) if 2 < m <= 16 else w8a8._config_table(m)


def _set_arm(arm: str) -> None:
    w8a8._config_builtin = {"old": _old, "new": NEW}[arm]
    paths.TABLE.choice.clear()
    paths.TABLE.timings.clear()


def main():
    os.environ.setdefault("WORKLOADS", "base,high_concurrency,prefill_bound")
    got = run_arms(sys.argv[1], "e2e_w8a8_ab", os.environ.get("ARMS", "old,new,old,new").split(","), _set_arm, "w8a8")
    print("\n| workload | arm | TTFT ms, mean of 3 runs, per arm in turn |")
    print("|---|---|---|")
    for wl in dict.fromkeys(r["workload"] for r in got):
        for arm in dict.fromkeys(r["arm"] for r in got):
            rs = [r for r in got if r["arm"] == arm and r["workload"] == wl and r["stats"]]
            if rs:
                print(f"| {wl} (batch {rs[0]['batch']}) | {arm} | "
                      + " / ".join(f"{r['stats']['ttft_ms']['mean']:.2f}" for r in rs) + " |")


if __name__ == "__main__":
    main()
