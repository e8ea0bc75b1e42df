#!/bin/bash
# Session 34 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tests i8" bash bench/results/h200/kernels_s34/run.sh
# Stages of its own (every other stage is kernels_s33/run.sh's, and through it kernels_s32/run.sh's: kcache, tests,
# table, e2e, tune, pack, ...):
# i8: w8a8_i8.py (the CUDA int8 GEMV's dense mode against the runtime's W8A8 paths, I8_MS tokens), $OUT/w8a8_i8.json.
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    i8) . "$here/../../h100/device_env.sh" > /dev/null
        timeout "${I8_LIMIT:-300}" python3 "$here/w8a8_i8.py" "$OUT/w8a8_i8${I8_TAG}.json" ${I8_MS} 2>&1 \
          | grep -v -E "warn|^ *$" | tee "$OUT/w8a8_i8${I8_TAG}.log" | grep -E "M= *[0-9]+|MISMATCH|Error|error|done" ;;
    *) STAGES=$stage bash "$here/../kernels_s33/run.sh" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
