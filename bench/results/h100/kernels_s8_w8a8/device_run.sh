#!/bin/bash
# Session 8 W8A8 (issue 3), one device call from the repo root (kind nvidia-h100-x1). Stages in $STAGES order; each
# stage's limit counts from this script's start (the device's timeout_s includes set-up) and a stage with no time
# left is skipped.
#   sweep: sweep_s8.py (SWEEP_M, SWEEP_S)                   -> $OUT/sweep.log, sweep.json, and $OUT/tuned.json
#          (COMPRESS_KERNEL_CONFIGS, exact-M keys) where a candidate beat session 5's config on median and gmean
#   tests: GPU tests of tests/test_s8_w8a8.py, test_kernels_w8a8.py and test_s7_w8a8_tma.py's CUDA-graph test
#          -> $OUT/tests.log
#   table: python -m compress.bench.kernels --suite w8a8 --output $OUT/kernels            -> $OUT/table.log
#   tests and table run with COMPRESS_KERNEL_CONFIGS=$OUT/tuned.json when the sweep wrote it.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
BUDGET=${BUDGET_S:-280}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
limit() {  # min(wanted, time left - 5); 0 means skip (never `timeout 0`: that is no limit)
  local l=$(( $(left) - 5 )); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 10 ] && l=0; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
echo "commit ${COMMIT:-unknown}"
for stage in ${STAGES:-sweep tests table}; do
  [ -f "$OUT/tuned.json" ] && export COMPRESS_KERNEL_CONFIGS="$OUT/tuned.json"
  date -u +"== $stage %H:%M:%S (left $(left) s)"
  case $stage in
    sweep)
      l=$(limit "${SWEEP_S:-140}"); [ "$l" = 0 ] && { echo "skip sweep"; continue; }
      TUNED_OUT="$OUT/tuned.json" SWEEP_S=$((l - 12)) timeout "$l" python3 bench/results/h100/kernels_s8_w8a8/sweep_s8.py \
        "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" \
        | grep --line-buffered -E "^(==|M=|FAIL|time limit|precompile|wrote|Traceback|[A-Za-z]*Error)" | cut -c1-200
      echo "rc $?" ;;
    tests)
      echo "COMPRESS_KERNEL_CONFIGS=${COMPRESS_KERNEL_CONFIGS:-unset}"
      l=$(limit "${TEST_S:-40}"); [ "$l" = 0 ] && { echo "skip tests"; continue; }
      timeout "$l" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_s8_w8a8.py tests/test_kernels_w8a8.py \
        tests/test_s7_w8a8_tma.py::test_tma_gemm_in_a_cuda_graph_gpu > "$OUT/tests.log" 2>&1
      echo "rc $?"; tail -4 "$OUT/tests.log" | cut -c1-200 ;;
    table)
      echo "COMPRESS_KERNEL_CONFIGS=${COMPRESS_KERNEL_CONFIGS:-unset}"; cat "${COMPRESS_KERNEL_CONFIGS:-/dev/null}" | tr -d ' \n'; echo
      l=$(limit "${TABLE_S:-120}"); [ "$l" = 0 ] && { echo "skip table"; continue; }
      timeout "$l" python3 -m compress.bench.kernels --suite w8a8 ${TABLE_ARGS:-} --output "$OUT/kernels" > "$OUT/table.log" 2>&1
      echo "rc $?"; tail -4 "$OUT/table.log" | cut -c1-200
      rm -f "$OUT"/kernels/*.png
      # the issue-3 lines: median speedup per M over the 8 shapes (the figure is the worst M of 1..16)
      python3 - "$OUT/kernels/kernels.json" <<'EOF' || true
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["results"].get("w8a8", [])
for m in sorted({r["M"] for r in rows}):
    v = [r["speedup"] for r in rows if r["M"] == m and r.get("speedup") and not r.get("variant")]
    print(f"TABLE M={m:5d} median x{statistics.median(v):.2f} over {len(v)} shapes  min x{min(v):.2f}" if v else f"TABLE M={m} none")
EOF
      ;;
  esac
done
date -u +"== done %H:%M:%S"
