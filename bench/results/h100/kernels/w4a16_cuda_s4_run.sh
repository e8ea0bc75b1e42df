#!/bin/bash
# Needs the earlier sources from git history first: `bash bench/results/baselines.sh` here, then carry the paths it prints.
# One device call for the W4A16 CUDA GEMV, session 4, from the repo root (kind nvidia-h100-x1):
#   1. build every variant of kernels/csrc/w4a16_gemv.cu, session 3's kernel (w4a16_cuda_s4_old.cu) and the read
#      reference with nvcc (parallel; cached under $COMPRESS_KERNEL_CACHE)
#   2. w4a16_cuda_s4_bench.py sections $SECTIONS (default: old new; see its docstring) -> $OUT/w4a16_cuda_s4_*.json
#   3. the GPU tests (tests/test_w4a16_cuda.py) against the plain-torch reference
#   4. the report -> $OUT/w4a16_cuda_s4.md
# Logs in $OUT/w4a16_cuda_s4_run.log.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/w4a16_cuda_s4_run.log"
B=bench/results/h100/kernels/w4a16_cuda_s4_bench.py
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
echo "commit ${COMMIT:-unknown}" | tee -a "$LOG"
echo "== build" | tee -a "$LOG"
timeout 60 python3 -c "
import time, torch
from kernels import w4a16_cuda
t = time.time(); w4a16_cuda.prebuild(torch.device('cuda'), sorted(w4a16_cuda.VARIANTS))
print(f'built {sorted(w4a16_cuda.VARIANTS)} in {time.time() - t:.1f} s')" 2>&1 | tee -a "$LOG" | tail -5
for s in ${SECTIONS:-old new}; do
  echo "== bench $s" | tee -a "$LOG"
  timeout ${BENCH_S:-100} python3 $B "$OUT" $s 2>&1 | tee -a "$LOG" | grep -E "^\[|Error|error" | cut -c1-220 | tail -${TAIL:-40}
done
# Session 3's kernel measured in an earlier call (SECTIONS without old): its JSON is in the repository.
[ -f "$OUT/w4a16_cuda_s4_old.json" ] || cp bench/results/h100/kernels/w4a16_cuda_s4_old.json "$OUT/"
echo "== gpu tests" | tee -a "$LOG"
timeout ${TEST_S:-80} python3 -m pytest tests/test_w4a16_cuda.py -q --maxfail=5 -p no:cacheprovider 2>&1 | tee -a "$LOG" | grep -E "passed|failed|Error|^FAILED|assert" | cut -c1-200 | tail -12
echo "== report" | tee -a "$LOG"
python3 $B "$OUT" report > /dev/null 2>>"$LOG"
grep -E "^\| (Llama|Qwen)|^Median" "$OUT/w4a16_cuda_s4.md" 2>/dev/null | cut -c1-200
