#!/bin/bash
# The kernel run behind bench/results/h100/kernels (session 3), one device call from the repo root:
#   1. short config sweep on 5 Llama shapes -> $OUT/kernels/tuned.json (best config per kernel and M bucket)
#   2. the W4A16 / W8A8 / 2:4 tables with those configs (COMPRESS_KERNEL_CONFIGS), tinygemm / torch._int_mm /
#      torch semi-structured / gemlite peers in the same run
#   3. the GPU tests of the three kernel files (real Llama shapes against the plain-torch references)
# Everything lands in $OUT/kernels (7 files: tuned.json, run.log, kernels.md, kernels.json, 3 plots).
set -o pipefail
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/kernels"
LOG="$OUT/kernels/run.log"
if ls .whl_k/*.whl >/dev/null 2>&1; then  # gemlite, a peer (pure Python + Triton), carried as a wheel
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl_k/*.whl && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$LOG"
echo "== tune" | tee -a "$LOG"
timeout 140 python3 -m compress.bench.kernel_tune --final --write "$OUT/kernels/tuned.json" w4a16 w8a8 sparse24 2>&1 \
  | tee -a "$LOG" | grep -E "^\[tune\]|ERROR|failed" | cut -c1-200
export COMPRESS_KERNEL_CONFIGS="$OUT/kernels/tuned.json"
echo "== bench" | tee -a "$LOG"
COMPRESS_BENCH_GEMLITE_M=1,16 COMPRESS_BENCH_GEMLITE_S=30 timeout 175 python3 -m compress.bench.kernels \
  --suite w4a16 --suite w8a8 --suite sparse24 --output "$OUT/kernels" 2>&1 | tee -a "$LOG" | tail -12
echo "== gpu tests" | tee -a "$LOG"
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_w4a16.py tests/test_kernels_w8a8.py \
  tests/test_kernels_sparse24.py 2>&1 | tee -a "$LOG" | tail -4
cat "$OUT/kernels/tuned.json"
