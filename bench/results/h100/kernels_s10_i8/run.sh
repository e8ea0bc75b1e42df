#!/usr/bin/env bash
# Session 10 device calls (repository root, kind nvidia-h100-x1): the CUDA int8 GEMV (kernels/i8_gemv.py) for W8A8 and
# 2:4 int8 at 1..16 tokens.
#   OUT=DIR STAGES="build tests sweep tables" LIMIT=540 bash bench/results/h100/kernels_s10_i8/run.sh
# build: every variant with nvcc in parallel; tests: tests/test_i8_gemv.py (the fragment probe first); sweep:
# i8_sweep.py (SWEEP_M, default 1,4,16); tables: `compress bench kernels --suite w8a8 --suite sparse24` (TABLE_ARGS).
# Every limit counts from the script's start; a stage with too little time left is skipped.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" COMPRESS_KERNEL_CACHE=/tmp/kc
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-540}
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee "$OUT/gpu.txt"
git log -1 --format=%H 2>/dev/null | tee -a "$LOG"
for s in ${STAGES:-build tests sweep tables}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    build)
      timeout 120 python3 -c "
import time, torch
from concurrent.futures import ThreadPoolExecutor
from kernels import cuda_build, i8_gemv
code, t = cuda_build.arch(torch.device('cuda')), time.time()
with ThreadPoolExecutor(8) as pool:
    list(pool.map(lambda nm: i8_gemv.compile_variant(code, nm), sorted(i8_gemv.VARIANTS)))
print(f'built {sorted(i8_gemv.VARIANTS)} in {time.time() - t:.1f} s')" 2>&1 | tee -a "$LOG" | tail -3 ;;
    tests)
      timeout ${TEST_S:-150} python3 -m pytest ${TEST_FILES:-tests/test_i8_gemv.py} -q -p no:cacheprovider \
        ${TEST_K:+-k "$TEST_K"} 2>&1 | tee "$OUT/tests.log" | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" \
        | cut -c1-600 | tail -25 ;;
    sweep)
      [ "$(left ${SWEEP_KEEP:-150})" -lt 60 ] && { echo "skip sweep: $(left) s left" | tee -a "$LOG"; continue; }
      timeout $(left ${SWEEP_KEEP:-150}) python3 bench/results/h100/kernels_s10_i8/i8_sweep.py "$OUT/sweep" \
        "${SWEEP_M:-1,4,16}" 2>&1 | tee "$OUT/sweep.log" | grep --line-buffered -vE "^\s+dense " | cut -c1-300 ;;
    tables)
      [ "$(left 5)" -lt 60 ] && { echo "skip tables: $(left) s left" | tee -a "$LOG"; continue; }
      timeout $(left 5) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w8a8 --suite sparse24} \
        --output "$OUT/tables" > "$OUT/tables.log" 2>&1
      echo "rc=$?"; grep -hE -- "->" "$OUT/tables/kernels.md" | head -10 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
cd "$OUT" && tar czf /tmp/results.tgz . && mv /tmp/results.tgz .
