#!/bin/bash
# Session 7 W8A8 many-token runs (issue 3), one device call from the repo root (kind nvidia-h100-x1):
#   STAGES="sweep tests" (call 1) or "tests table sweep" (call 2); each stage's time limit counts from the script's
#   start (the device's own timeout_s includes set-up), and a stage with no time left is skipped.
#   sweep: bench/results/h100/kernels_s7_w8a8/sweep_tma.py (SWEEP_M, SWEEP_S)       -> $OUT/sweep.log, sweep.json,
#          and $OUT/tuned.json (COMPRESS_KERNEL_CONFIGS format) when a TMA config beat the pointer GEMM's median
#   the table and the tests run with COMPRESS_KERNEL_CONFIGS=$OUT/tuned.json when the sweep wrote it
#   tests: GPU tests of tests/test_s7_w8a8_tma.py and tests/test_kernels_w8a8.py    -> $OUT/tests.log
#   table: python3 -m compress.bench.kernels --suite w8a8 $TABLE_ARGS --output $OUT/kernels -> $OUT/table.log
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
BUDGET=${BUDGET_S:-330}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
limit() {  # min(wanted, time left - 5); 0 means skip
  local l=$(( $(left) - 5 )); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 10 ] && l=0; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
echo "commit ${COMMIT:-unknown}"
for stage in ${STAGES:-sweep tests}; do
  [ -f "$OUT/tuned.json" ] && export COMPRESS_KERNEL_CONFIGS="$OUT/tuned.json"
  date -u +"== $stage %H:%M:%S (left $(left) s)"
  case $stage in
    sweep)
      l=$(limit "${SWEEP_S:-220}"); [ "$l" = 0 ] && { echo "skip sweep"; continue; }
      TUNED_OUT="$OUT/tuned.json" SWEEP_S=$((l - 15)) timeout "$l" python3 bench/results/h100/kernels_s7_w8a8/sweep_tma.py "$OUT/sweep.json" 2>&1 \
        | tee "$OUT/sweep.log" | grep --line-buffered -E "^(==|M=|FAIL|time limit|precompile|wrote|Traceback|[A-Za-z]*Error)" | cut -c1-220
      echo "rc $?" ;;
    tests)
      echo "COMPRESS_KERNEL_CONFIGS=${COMPRESS_KERNEL_CONFIGS:-unset}"
      l=$(limit "${TEST_S:-70}"); [ "$l" = 0 ] && { echo "skip tests"; continue; }
      timeout "$l" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_s7_w8a8_tma.py tests/test_kernels_w8a8.py \
        > "$OUT/tests.log" 2>&1
      echo "rc $?"; tail -6 "$OUT/tests.log" | cut -c1-220 ;;
    table)
      echo "COMPRESS_KERNEL_CONFIGS=${COMPRESS_KERNEL_CONFIGS:-unset}"; cat "${COMPRESS_KERNEL_CONFIGS:-/dev/null}"
      # TABLE_IF_TUNED=1: the table only when the sweep found a TMA winner (else it would repeat session 5's table)
      [ -n "$TABLE_IF_TUNED" ] && [ -z "$COMPRESS_KERNEL_CONFIGS" ] && { echo "skip table: no tuned.json"; continue; }
      l=$(limit "${TABLE_S:-150}"); [ "$l" = 0 ] && { echo "skip table"; continue; }
      timeout "$l" python3 -m compress.bench.kernels --suite w8a8 ${TABLE_ARGS:-} --output "$OUT/kernels" > "$OUT/table.log" 2>&1
      echo "rc $?"; tail -14 "$OUT/table.log" | cut -c1-220
      rm -f "$OUT"/kernels/*.png ;;
  esac
done
date -u +"== done %H:%M:%S"
