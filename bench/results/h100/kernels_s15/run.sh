#!/bin/bash
# Session 15 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   sp24   sp24_i8_sweep.py: the 2:4 PRMT GEMVs with / without "ring" at one token (SP_MS, SP_DTYPES, SP_SHAPES,
#          SP_VARIANTS) against the dense paths
#   tc     session 14's sp24_tc_sweep.py (the 2:4 tensor-core GEMM's configs vs what serves), env TC_MS, TC_DTYPES,
#          TC_SHAPES, TC_VARIANTS (tc_variants.json unless set); TC2_MS / TC2_VARIANTS: a second pass (e.g. above 64 tokens)
#   e2e    e2e_sp24_ab.py: synthetic Llama-3-8B 2:4 fp16 / int8, session 14's 2:4 kernels vs this tree's, arms in turn
#   tests  pytest argument sets in TEST_SETS (';' between them; each set is split on spaces, so no quoted -k expression)
#   table  `compress bench kernels $TABLE_ARGS` (default --suite sparse24) on the tree as it is
# Every limit counts from the script's start, so a later stage gets what is left.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-580}
DIR=bench/results/h100/kernels_s15
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
git log -1 --format='commit %h %s' 2>/dev/null | cut -c1-120 | tee -a "$LOG"
for s in ${STAGES:-sp24}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    sp24)
      timeout $(left ${SP_REST:-5}) python3 $DIR/sp24_i8_sweep.py "$OUT" 2>&1 | tee -a "$LOG" | cut -c1-700 ;;
    tc)
      TC_VARIANTS="${TC_VARIANTS:-$(cat $DIR/tc_variants.json)}" timeout $(left ${TC_REST:-5}) \
        python3 bench/results/h100/kernels_s14/sp24_tc_sweep.py "$OUT/tc" 2>&1 | tee -a "$LOG" | cut -c1-600
      if [ -n "$TC2_MS" ]; then
        TC_MS=$TC2_MS TC_VARIANTS="$(cat ${TC2_VARIANTS:-$DIR/tc_wide_variants.json})" timeout $(left ${TC2_REST:-5}) \
          python3 bench/results/h100/kernels_s14/sp24_tc_sweep.py "$OUT/tc_wide" 2>&1 | tee -a "$LOG" | cut -c1-600
      fi ;;
    e2e)
      AB_LIMIT_S=${AB_LIMIT:-$(( $(left ${E2E_REST:-100}) / 2 ))} timeout $(left ${E2E_REST:-60}) \
        python3 $DIR/e2e_sp24_ab.py "$OUT" 2>&1 | tee -a "$LOG" | grep --line-buffered -E "^\||done|stopped|Error" | cut -c1-300 ;;
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
