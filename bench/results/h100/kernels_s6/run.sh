#!/bin/bash
# Session 6 device calls for the W4A16 CUDA GEMV (repository root, kind nvidia-h100-x1), OUT=$OUT:
#   call 1: STAGES="tests ab"                       GPU tests, then ab.py (balanced schedule A/B, every shape)
#   call 2: STAGES="build tests2 ab2 e2e table"     parallel build, the balanced / PDL / variant GPU tests, ab.py lite
#           (writes $OUT/picks.json), then the e2e decode bench and the kernels table with COMPRESS_W4A16_PICKS on it
# Every limit counts from the script's start (LIMIT, seconds), so the last stage gets what is left.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-420}
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
echo "commit $(git rev-parse --short HEAD 2>/dev/null) dirty=$(git status --porcelain kernels tests | wc -l)" | tee -a "$LOG"
picks() { [ -s "$OUT/picks.json" ] && echo "COMPRESS_W4A16_PICKS=$OUT/picks.json"; }
for s in ${STAGES:-tests ab}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    build)
      timeout 90 python3 -c "
import time, torch
from kernels import w4a16_cuda
t = time.time(); w4a16_cuda.prebuild(torch.device('cuda'), sorted(w4a16_cuda.VARIANTS))
print(f'built {sorted(w4a16_cuda.VARIANTS)} in {time.time() - t:.1f} s')" 2>&1 | tee -a "$LOG" | tail -3 ;;
    tests)
      timeout ${TEST_S:-120} python3 -m pytest tests/test_w4a16_cuda.py -q --maxfail=5 -p no:cacheprovider 2>&1 | tee -a "$LOG" \
        | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" | cut -c1-300 | tail -15 ;;
    tests2)
      timeout ${TEST_S:-60} python3 -m pytest tests/test_w4a16_cuda.py -q --maxfail=5 -p no:cacheprovider \
        -k "balanced or back_to_back or same_inputs or every_build_variant or cluster" 2>&1 | tee -a "$LOG" \
        | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" | cut -c1-300 | tail -15 ;;
    ab|ab2)
      arg=$([ $s = ab2 ] && echo lite)
      timeout ${AB_S:-$(left 5)} python3 bench/results/h100/kernels_s6/ab.py "$OUT" $arg 2>&1 | tee "$OUT/$s.log" \
        | grep --line-buffered -vE "^\|" | cut -c1-400 ;;
    table)
      env $(picks) timeout $(left 5) python3 -m compress.bench.kernels --suite w4a16 --quick --output "$OUT/kernels" 2>&1 \
        | tee "$OUT/table.log" | grep --line-buffered -E "M=|median|Error|error" | cut -c1-300 | tail -20
      rm -f "$OUT"/kernels/*.png ;;
    e2e)
      env $(picks) timeout ${E2E_S:-$(left 5)} python3 -m compress.bench.e2e --synthetic llama-3-8b --formats fp16,w4a16 \
        --workloads decode_bound --runs 3 --output "$OUT/e2e" 2>&1 | tee "$OUT/e2e.log" \
        | grep --line-buffered -E "TPOT|bound|Error" | cut -c1-300 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
for f in ab ab2; do [ -f "$OUT/$f.log" ] && grep -E "^\||^M=|^token" "$OUT/$f.log"; done
[ -f "$OUT/kernels/kernels.md" ] && grep -iE "median" "$OUT/kernels/kernels.md" | head -8
[ -f "$OUT/e2e.log" ] && grep -E "TPOT / bound|_w4a16 .*\||_fp16 .*\|" "$OUT/e2e.log" | tail -6
