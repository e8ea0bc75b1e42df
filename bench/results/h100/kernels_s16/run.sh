#!/bin/bash
# Session 16 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   sp24   kernels_s15/sp24_i8_sweep.py: the 2:4 int8 one-token GEMVs (served, the SP_VARIANTS configs; default
#          iw_variants.json, the meta-word PRMT GEMV `_sparse24_gemv_iw_kernel`) against the dense W8A8 paths
#   tests  pytest argument sets in TEST_SETS (';' between them)
#   table  `compress bench kernels $TABLE_ARGS` (default --suite sparse24) on the tree as it is
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-580}
DIR=bench/results/h100/kernels_s16
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
for s in ${STAGES:-sp24}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    sp24)
      SP_VARIANTS="${SP_VARIANTS:-$(cat $DIR/iw_variants.json)}" timeout $(left ${SP_REST:-5}) \
        python3 bench/results/h100/kernels_s15/sp24_i8_sweep.py "$OUT" 2>&1 | tee -a "$LOG" | cut -c1-900 ;;
    tests)
      IFS=';' read -ra SETS <<< "$TEST_SETS"
      for t in "${SETS[@]}"; do
        echo "-- pytest $t" | tee -a "$LOG"
        timeout $(left ${TEST_REST:-5}) python3 -m pytest $t -q -p no:cacheprovider 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -8
      done ;;
    table)
      timeout $(left 3) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite sparse24} --output "$OUT/kernels" 2>&1 \
        | tee -a "$LOG" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
