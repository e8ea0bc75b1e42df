"""Session 13: what the launch changes of this session do end to end, in one process: `compress bench e2e`'s run_e2e on
synthetic Llama-3-8B at the batched decode workloads (medium_batch 8, base 32, high_concurrency 64), arms in turn (ARMS,
default "plain,pdl,plain,pdl").
- FORMAT=w4a16 (default): the W4A16 tensor-core tiles. "plain" launches them all plainly (session 12), "pdl" as this
  tree does (TILE_LAUNCH from TILE_LAUNCH_MIN_M tokens), "all" every tile with PDL, "pfall" every tile with PDL and the
  first 2 KB of each weight row sent to L2 before the wait.
- FORMAT=w8a8: the W8A8 GEMM's config at 3..16 tokens (kernels.w8a8._config_s8): "plain" without "qwait" and
  "pdl_wide", "nowide" without "pdl_wide", "pdl" as this tree has it.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s13/e2e_pdl_ab.py OUT
The runtime's path table (compress.runtime.paths.TABLE, one per process) chooses between the CUDA GEMV and the Triton
launcher per layer shape and M bucket in the first arm; later arms keep those choices, so the arms differ only in how
the same kernels launch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kernels import w4a16, w8a8

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels_s12"))
from e2e_ab import run_arms  # noqa: E402  (session 12's A/B loop: arms in turn in one process, then the TPOT table)

FORMAT = os.environ.get("FORMAT", "w4a16")
# W4A16 arm -> (TILE_LAUNCH, TILE_LAUNCH_MIN_M): "pdl" is this tree's default; "all" launches every tile that way,
# "pfall" also sends the first 2 KB of each weight row to L2 before the wait
LAUNCH = {"plain": ({}, 1), "pdl": (dict(w4a16.TILE_LAUNCH), w4a16.TILE_LAUNCH_MIN_M), "all": ({"pdl": 0}, 1),
          "pfall": ({"pdl": 2048}, 1)}
CONFIG_S8 = w8a8._config_s8


def _set_arm(arm: str) -> None:
    if FORMAT == "w4a16":
        w4a16.TILE_LAUNCH, w4a16.TILE_LAUNCH_MIN_M = LAUNCH[arm]
    else:  # "plain": neither "qwait" nor "pdl_wide" (session 12); "nowide": "qwait" only; "pdl": this tree's
        drop = {"pdl": (), "nowide": ("pdl_wide",), "plain": ("qwait", "pdl_wide")}[arm]
        w8a8._config_s8 = lambda m: {k: v for k, v in CONFIG_S8(m).items() if k not in drop}


def main():
    run_arms(sys.argv[1], f"e2e_pdl_ab_{FORMAT}", os.environ.get("ARMS", "plain,pdl,plain,pdl").split(","), _set_arm,
             FORMAT)


if __name__ == "__main__":
    main()
