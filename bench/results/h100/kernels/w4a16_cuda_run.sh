#!/bin/bash
# Session 3 (kernel as of commit 4f538cc); session 4 uses w4a16_cuda_s4_run.sh.
# One device call for the CUDA C++ W4A16 GEMV (kernels/w4a16_cuda.py), from the repo root:
#   1. build the build variants with nvcc (parallel; cached under $COMPRESS_KERNEL_CACHE)
#   2. its GPU tests (tests/test_w4a16_cuda.py) against the plain-torch reference
#   3. bench/results/h100/kernels/w4a16_cuda_bench.py: sweep of build variant x split plan, then CUDA GEMV vs
#      torch fp16 vs Triton on Llama-3 8B/70B shapes at M = 1..16 (two L2-flush methods, see its docstring),
#      group 64 / asymmetric / bf16 instances -> $OUT/w4a16_cuda.{md,json}
# Logs in $OUT/w4a16_cuda_run.log.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/w4a16_cuda_run.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
echo "== build" | tee -a "$LOG"
timeout 45 python3 -c "
import time, torch
from kernels import w4a16_cuda
t = time.time(); w4a16_cuda.prebuild(torch.device('cuda'), sorted(w4a16_cuda.VARIANTS))
print(f'built {sorted(w4a16_cuda.VARIANTS)} in {time.time() - t:.1f} s')" 2>&1 | tee -a "$LOG" | tail -5
echo "== gpu tests" | tee -a "$LOG"
timeout 70 python3 -m pytest tests/test_w4a16_cuda.py -q --maxfail=3 -p no:cacheprovider 2>&1 | tee -a "$LOG" | tail -25
echo "== bench" | tee -a "$LOG"
timeout 175 python3 bench/results/h100/kernels/w4a16_cuda_bench.py "$OUT" 2>&1 | tee -a "$LOG" | grep -E "^\[w4a16_cuda\]|^\[main\]|Error|error" | cut -c1-300 | tail -14
echo "== summary" | tee -a "$LOG"
grep -E "^(Median|Tuned)" "$OUT/w4a16_cuda.md" 2>/dev/null | cut -c1-400
