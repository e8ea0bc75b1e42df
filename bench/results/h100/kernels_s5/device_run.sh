#!/bin/bash
# Session 5 kernel runs (issue 3), one device call from the repo root (kind nvidia-h100-x1):
#   STAGES="tune table tests" (default: all three, in that order)
#   tune:  python3 -m compress.bench.kernel_tune --final w8a8 sparse24 (rotating timing, every config checked on
#          every shape; one process per job)                        -> $OUT/tune.log, tune_<job>.json
#   table: python3 -m compress.bench.kernels --suite $SUITES (default w4a16 w8a8 sparse24) $TABLE_ARGS
#          (rotating timing, the default)                 -> $OUT/table.log, $OUT/kernels/{kernels.md,json} (+ plots: KEEP_PNG=1)
#   table2: the same with SUITES2 (default w4a16) in a second process    -> $OUT/kernels_w4a16/ (log on stdout)
#   tests: the GPU tests of the W8A8 / 2:4 kernel files and tests/test_glue_kernels.py -> stdout
# gemlite (a W4A16 peer) is installed from .whl_k when carried.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/kernels"
if ls .whl_k/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl_k/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
echo "commit ${COMMIT:-unknown}"
for stage in ${STAGES:-tune table tests}; do
  date -u +"== $stage %H:%M:%S"
  case $stage in
    tune)  # one process per job, each with its own time limit: a job cut short loses only its own results
      for job in ${TUNE_JOBS:-w8a8 sparse24}; do
        limit=$(eval echo "\${TUNE_S_$job:-\${TUNE_S:-150}}")
        TUNE_JSON="$OUT/tune_$job.json" timeout "$limit" python3 -m compress.bench.kernel_tune --final $job \
          >> "$OUT/tune.log" 2>&1
        echo "$job rc $?"
      done
      grep -E "^\[tune\]|ERROR|failed" "$OUT/tune.log" | cut -c1-200 | tail -20 ;;
    table)
      suites=""; for s in ${SUITES:-w4a16 w8a8 sparse24}; do suites="$suites --suite $s"; done
      COMPRESS_BENCH_GEMLITE_M=1,16 COMPRESS_BENCH_GEMLITE_S=${GEMLITE_S:-30} timeout "${TABLE_S:-200}" \
        python3 -m compress.bench.kernels $suites ${TABLE_ARGS:-} --output "$OUT/kernels" > "$OUT/table.log" 2>&1
      echo "rc $?"; tail -12 "$OUT/table.log" | cut -c1-200
      [ -n "$KEEP_PNG" ] || rm -f "$OUT"/kernels/*.png ;;  # the call returns at most 8 files
    table2)  # a second table process (SUITES2, default w4a16) -> $OUT/kernels_w4a16; its log to stdout only
      suites=""; for s in ${SUITES2:-w4a16}; do suites="$suites --suite $s"; done
      COMPRESS_BENCH_GEMLITE_M=1,16 COMPRESS_BENCH_GEMLITE_S=${GEMLITE_S:-30} timeout "${TABLE2_S:-200}" \
        python3 -m compress.bench.kernels $suites ${TABLE_ARGS:-} --output "$OUT/kernels_w4a16" 2>&1 | tail -12 | cut -c1-200
      echo "rc $?" ;;
    tests)
      timeout "${TEST_S:-60}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_w8a8.py \
        tests/test_kernels_sparse24.py 2>&1 | tail -15 | cut -c1-200
      echo "rc $?"
      # the runtime's int8 GEMV now takes its jit helpers from kernels/w8a8.py: its own tests, on the GPU
      if [ "${GLUE_S:-60}" != 0 ]; then
        timeout "${GLUE_S:-60}" python3 -m pytest -q -p no:cacheprovider tests/test_glue_kernels.py 2>&1 | tail -5 | cut -c1-200
        echo "rc $?"
      fi ;;
  esac
done
date -u +"== done %H:%M:%S"
