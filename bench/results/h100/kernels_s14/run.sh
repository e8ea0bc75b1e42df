#!/bin/bash
# Session 14 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   m256   the W8A8 GEMM's tiles at 256 tokens (M256_VARIANTS, default m256_variants.json) on the 8 Llama-3 shapes,
#          through session 13's w8a8_sweep.py (quantizer included, each arm twice in turn, the faster kept)
#   tests  pytest argument sets in TEST_SETS (';' between them; each set is split on spaces, so no quoted -k expression)
#   e2e    e2e_w8a8_ab.py: synthetic Llama-3-8B W8A8, session 13's tiles above 16 tokens vs this tree's, arms in turn
#   table  `compress bench kernels $TABLE_ARGS` (default --suite w8a8) on the tree as it is
# Every limit counts from the script's start, so a later stage gets what is left.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-580}
DIR=bench/results/h100/kernels_s14
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
for s in ${STAGES:-m256}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    m256)
      W8_MS=${M256_MS:-256} W8_SHAPES=${M256_SHAPES:-4096x4096,1024x4096,14336x4096,4096x14336,8192x8192,1024x8192,28672x8192,8192x28672} \
        W8_VARIANTS="$(cat ${M256_VARIANTS:-$DIR/m256_variants.json})" \
        timeout $(left ${M256_REST:-5}) python3 bench/results/h100/kernels_s13/w8a8_sweep.py "$OUT" 2>&1 | tee -a "$LOG" | cut -c1-900 ;;
    tests)
      IFS=';' read -ra SETS <<< "$TEST_SETS"
      for t in "${SETS[@]}"; do
        echo "-- pytest $t" | tee -a "$LOG"
        timeout $(left ${TEST_REST:-5}) python3 -m pytest $t -q -p no:cacheprovider 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -8
      done ;;
    e2e)
      AB_LIMIT_S=${AB_LIMIT:-$(( $(left ${E2E_REST:-100}) / 2 ))} timeout $(left ${E2E_REST:-60}) \
        python3 $DIR/e2e_w8a8_ab.py "$OUT" 2>&1 | tee -a "$LOG" | grep --line-buffered -E "^\||done|stopped|Error" | cut -c1-300 ;;
    table)
      timeout $(left 3) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w8a8} --output "$OUT/kernels" 2>&1 \
        | tee -a "$LOG" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
