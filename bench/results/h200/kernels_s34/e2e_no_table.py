"""Session 34: `compress bench e2e` as on a GPU whose name has no entry in kernels/w4a16_ws.py's TUNED_BY_GPU. The
H200's entries are dropped before the runtime loads, so every int4 layer shape offers the WS GEMV under each of
SEARCH_CONFIGS (computed at import, from the entries) and the path table keeps the fastest single call, as it would on
an unmeasured GPU. Compare its TPOT with the shipped table's (call 1: 1.810 ms, synthetic Llama-3-8B W4A16).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s34/e2e_no_table.py [compress bench e2e args]
"""

import sys

import typer

from kernels import w4a16_ws

print(f"search configs {w4a16_ws.SEARCH_CONFIGS}; dropping the entries of {sorted(w4a16_ws.TUNED_BY_GPU)}", flush=True)
w4a16_ws.TUNED_BY_GPU.clear()
from compress.bench.e2e import e2e  # noqa: E402

sys.argv = ["e2e", *sys.argv[1:]]
typer.run(e2e)
