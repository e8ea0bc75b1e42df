#!/bin/bash
# Session 17 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   tests  pytest argument sets in TEST_SETS (';' between them)
#   w8a16  w8a16_sweep.py: 2:4 W8A16 (served config + W16_VARIANTS) against the runtime's dense W8A16 layer and fp16
#   e2e    `compress bench e2e --synthetic llama-3-8b --formats $E2E_FORMATS --workloads $E2E_WORKLOADS --runs 3`
#   table  `compress bench kernels $TABLE_ARGS` (default --suite sparse24) on the tree as it is
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-580}
DIR=bench/results/h100/kernels_s17
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
for s in ${STAGES:-tests}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    tests)
      IFS=';' read -ra SETS <<< "$TEST_SETS"
      for t in "${SETS[@]}"; do
        echo "-- pytest $t" | tee -a "$LOG"
        timeout $(left ${TEST_REST:-5}) python3 -m pytest $t -q -p no:cacheprovider 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -8
      done ;;
    w8a16)
      timeout $(left ${W16_REST:-5}) python3 $DIR/w8a16_sweep.py "$OUT/w8a16" 2>&1 | tee -a "$LOG" | cut -c1-700 ;;
    e2e)
      timeout $(left ${E2E_REST:-5}) python3 -m compress.bench.e2e --synthetic llama-3-8b \
        --formats ${E2E_FORMATS:-w8a16,w8a16-sparse24} --workloads ${E2E_WORKLOADS:-interactive,decode_bound,medium_batch} \
        --runs 3 --output "$OUT/e2e" 2>&1 | tee -a "$LOG" | grep --line-buffered -E "TPOT|Error|error" | cut -c1-200 ;;
    table)
      timeout $(left 3) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite sparse24} --output "$OUT/kernels" 2>&1 \
        | tee -a "$LOG" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
