#!/usr/bin/env bash
# Session-4 driver on the lent GPU machine: recipes_vs_oneshot.py for the given recipes and seeds, one process,
# under an inner time limit so the call always returns its log. Every finished row is a "ROW {json}" line in
# the log; `python bench/recipes_vs_oneshot.py --merge-log LOG... --out DIR` rebuilds the table from them.
# Set-up: smollm2_setup.sh (wheels, the SmolLM2 GGUF from its two halves, a bf16 HF folder).
# Usage: LIMIT=560 bash bench/results/h100/recipes/seq_run.sh OUT_DIR [bench args: --recipes ... --seeds ... --no-warmup]
set -uo pipefail
out=$1; shift
mkdir -p "$out"
source bench/results/h100/recipes/smollm2_setup.sh
sha256sum $gguf > "$out/gguf.sha256"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt"
# LIMIT counts from the start of this script (set-up included), so the call returns before the device's own limit;
# grep is line-buffered so every finished row is on disk when the limit strikes.
timeout $(( ${LIMIT:-560} - SECONDS )) python3 bench/recipes_vs_oneshot.py --model /tmp/smol-hf --out "$out/run" "$@" 2>&1 \
  | grep --line-buffered -v "it/s\]\|examples/s\]\|Grid search\| INFO \| METRIC " > "$out/run.log"
rm -rf "$out/run/checkpoints"
grep -a -o "ROW {.*" "$out/run.log" | python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l[4:]); print(r['recipe'], r['seed'], round(r['ppl_compress'], 3), round(r['ppl_oneshot'], 3), r['wall_compress_s'], r['wall_oneshot_s'])"
