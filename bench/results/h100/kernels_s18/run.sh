#!/bin/bash
# Session 18 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   tests  pytest argument sets in TEST_SETS (';' between them)
#   probe  w16_probe.py (PROBE_ARMS, PROBE_SHAPES as there) -> $OUT/probe
#   state  table_state.py on STATE_SHAPES (the table's M = 1 W8A16 2:4 timing vs a direct call, before / after the
#          table's rows of that shape) -> $OUT/state
#   table  `compress bench kernels $TABLE_ARGS` (default --suite sparse24) on the tree as it is
# With CLOCKS=1 nvidia-smi logs SM / memory clocks, power, temperature and the clock-event reasons every 250 ms of the
# whole call to $OUT/clocks.csv, and each stage's start is logged with its time (to line the two up).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-560}
DIR=bench/results/h100/kernels_s18
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
if [ "${CLOCKS:-0}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu --format=csv \
    -lms 250 > "$OUT/clocks.csv" 2>&1 &
  SMI=$!
fi
for s in ${STAGES:-tests}; do
  echo "== [$SECONDS s] $(date -u +%H:%M:%S) $s" | tee -a "$LOG"
  case $s in
    tests)
      IFS=';' read -ra SETS <<< "$TEST_SETS"
      for t in "${SETS[@]}"; do
        echo "-- pytest $t" | tee -a "$LOG"
        timeout $(left ${TEST_REST:-5}) python3 -m pytest $t -q -p no:cacheprovider 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -8
      done ;;
    probe)
      timeout $(left ${PROBE_REST:-5}) python3 $DIR/w16_probe.py "$OUT/probe" 2>&1 | tee -a "$LOG" | grep -v "^compiled" \
        | cut -c1-900 ;;
    state)
      timeout $(left ${STATE_REST:-5}) python3 $DIR/table_state.py "$OUT/state" $STATE_SHAPES 2>&1 | tee -a "$LOG" \
        | grep --line-buffered -E "us|Error|error" | cut -c1-400 ;;
    table)
      timeout $(left ${TABLE_REST:-3}) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite sparse24} --output "$OUT/kernels" \
        2>&1 | tee -a "$LOG" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12 ;;
  esac
done
echo "== [$SECONDS s] $(date -u +%H:%M:%S) done" | tee -a "$LOG"
[ -n "$SMI" ] && kill $SMI 2>/dev/null; true
