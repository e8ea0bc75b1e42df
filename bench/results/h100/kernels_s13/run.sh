#!/bin/bash
# Session 13 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   tests  the GPU tests of what this session changed (W4A16 tiles under PDL, the W8A8 "qwait" launch, the PDL switch)
#   e2e    e2e_pdl_ab.py per FORMATS (w4a16 w8a8): synthetic Llama-3-8B batched decode, launches of before / now in turn
#   qwait  w8a8_qwait.py (QW_MS, default 4,8,16): the W8A8 paths with and without "qwait", same process
#   build  every CUDA W4A16 GEMV variant, in parallel
#   table  `compress bench kernels $TABLE_ARGS` (default --suite w4a16) on the committed defaults
# Every limit counts from the script's start, so a later stage gets what is left.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-580}
DIR=bench/results/h100/kernels_s13
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
git log --oneline -1 2>/dev/null | tee -a "$LOG"
for s in ${STAGES:-tests e2e qwait build table}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    tests)  # each pytest capped (CAP s) and never past what the later stages need (REST_S)
      cap() { local l=$(left ${REST_S:-300}); echo $(( $1 < l ? $1 : l )); }
      DEFAULT_SETS="tests/test_s13_w4a16_pdl.py tests/test_s12_w4a16_split.py tests/test_glue_kernels.py;tests/test_kernels_w4a16.py"
      DEFAULT_SETS="$DEFAULT_SETS;tests/test_s8_w4a16_wide.py -k tuned;tests/test_kernels_w8a8.py -k chained"
      IFS=';' read -ra SETS <<< "${TEST_SETS:-$DEFAULT_SETS}"  # TEST_SETS: pytest argument sets, ';' between them
      for t in "${SETS[@]}"; do
        echo "-- pytest $t" | tee -a "$LOG"
        timeout $(cap 170) python3 -m pytest $t -q -p no:cacheprovider 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -8
      done ;;
    e2e)  # FORMATS: e2e_pdl_ab.py once per format
      for f in ${FORMATS:-w4a16 w8a8}; do
        FORMAT=$f ARMS=${ARMS:-plain,pdl,plain,pdl,plain,pdl} AB_LIMIT_S=${AB_LIMIT:-$(( $(left ${E2E_REST:-150}) / 2 ))} \
          timeout $(left ${E2E_REST:-60}) python3 $DIR/e2e_pdl_ab.py "$OUT" 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "^\||done|stopped|Error" | cut -c1-300
      done ;;
    qwait)
      timeout $(( $(left 120) < 130 ? $(left 120) : 130 )) python3 $DIR/w8a8_qwait.py "$OUT" 2>&1 | tee -a "$LOG" | cut -c1-300 ;;
    build)
      timeout $(left 3) python3 -c "
import torch
from kernels import w4a16_cuda
w4a16_cuda.prebuild(torch.device('cuda'), sorted(w4a16_cuda.VARIANTS))" 2>&1 | tail -2 ;;
    table)
      timeout $(left 3) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16} --output "$OUT/kernels" 2>&1 \
        | tee -a "$LOG" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
