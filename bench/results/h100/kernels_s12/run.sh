#!/bin/bash
# Session 12 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all:
#   sweep  sweep.py: the split-K tail with four partials in flight (before / after, same process) and a sweep of
#          Triton tiles x split counts at M = 16 / 32 / 64 -> $OUT/sweep.json, picks.json, the table
#   tests  the GPU tests of the Triton kernels whose split-K tail changed (W4A16, 2:4, W8A8, VPTQ)
#   ab8    ab_round_w8a8.py: the tail before / after on the W8A8 GEMM (M = 4 / 8 / 16), same process
#   build  every CUDA W4A16 GEMV variant, in parallel
#   table  `compress bench kernels $TABLE_ARGS` (default --suite w4a16 --quick) on the committed defaults
# Every limit counts from the script's start, so a later stage gets what is left.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-480}
DIR=bench/results/h100/kernels_s12
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
for s in ${STAGES:-sweep tests}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    sweep)
      SWEEP_LIMIT_S=$(left ${SWEEP_TAIL:-${TEST_S:-90}}) timeout $(left ${TEST_S:-90}) python3 $DIR/sweep.py "$OUT" 2>&1 \
        | tee "$OUT/sweep.log" | grep --line-buffered -vE "^\||warm tc" | cut -c1-400 ;;
    tests)
      timeout $(left ${TABLE_S:-3}) python3 -m pytest ${TESTS:-tests/test_kernels_w4a16.py tests/test_kernels_sparse24.py \
        tests/test_kernels_w8a8.py tests/test_kernels_vptq.py} -q -p no:cacheprovider ${TEST_K:+-k "$TEST_K"} 2>&1 | tee -a "$LOG" \
        | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" | cut -c1-300 | tail -15 ;;
    ab8)  # ab_round_w8a8.py: the tail before / after on the W8A8 GEMM at M = 4 / 8 / 16
      timeout $(left ${TABLE_S:-3}) python3 $DIR/ab_round_w8a8.py "$OUT" 2>&1 | tee "$OUT/ab8.log" | cut -c1-300 ;;
    build)  # every CUDA GEMV variant, in parallel (the table's CUDA column would otherwise build inside the timing)
      timeout $(left 3) python3 -c "
import torch
from kernels import w4a16_cuda
w4a16_cuda.prebuild(torch.device('cuda'), sorted(w4a16_cuda.VARIANTS))" 2>&1 | tail -2 ;;
    table)
      timeout $(left 3) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16 --quick} --output "$OUT/kernels" 2>&1 \
        | tee "$OUT/table.log" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12
      mkdir -p "$OUT/tables" && mv "$OUT"/kernels/kernels.md "$OUT/tables/$(echo $TABLE_ARGS | tr -cd 'a-z0-9')".md 2>/dev/null
      mv "$OUT"/kernels/kernels.json "$OUT/tables/$(echo $TABLE_ARGS | tr -cd 'a-z0-9')".json 2>/dev/null ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
[ -f "$OUT/sweep.log" ] && grep -E "^\||^M=" "$OUT/sweep.log"
