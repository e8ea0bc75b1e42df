#!/bin/bash
# Session 34 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tests i8" bash bench/results/h200/kernels_s34/run.sh
# Stages of its own (every other stage is kernels_s33/run.sh's, and through it kernels_s32/run.sh's: kcache, tests,
# table, e2e, tune, pack, ...):
# i8: w8a8_i8.py (the CUDA int8 GEMV's dense mode against the runtime's W8A8 paths, I8_MS tokens), $OUT/w8a8_i8.json;
# w8: kernels_s13/w8a8_sweep.py (the W8A8 GEMM's tiles at W8_MS tokens, W8_SHAPES, W8_VARIANTS), $OUT/w8a8_sweep/;
# notable: e2e_no_table.py (`compress bench e2e` W4A16 decode_bound on synthetic E2E_ARCH without the WS GEMV's H200
#   configs: the configs' search, as on an unmeasured GPU; E2E_EXTRA more arguments, e.g. --tune-paths),
#   $OUT/e2e_notable_ARCH${E2E_TAG}.
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    i8) . "$here/../../h100/device_env.sh" > /dev/null
        timeout "${I8_LIMIT:-300}" python3 "$here/w8a8_i8.py" "$OUT/w8a8_i8${I8_TAG}.json" ${I8_MS} 2>&1 \
          | grep -v -E "warn|^ *$" | tee "$OUT/w8a8_i8${I8_TAG}.log" | grep -E "M= *[0-9]+|MISMATCH|Error|error|done" ;;
    w8) . "$here/../../h100/device_env.sh" > /dev/null
        timeout "${W8_LIMIT:-300}" python3 "$here/../../h100/kernels_s13/w8a8_sweep.py" "$OUT/w8a8_sweep${W8_TAG}" 2>&1 \
          | grep -v -E "warn|^ *$" | tee "$OUT/w8a8_sweep${W8_TAG}.log" | grep -E "M=|FAILED|Error|error" | cut -c1-400 ;;
    notable) . "$here/../../h100/device_env.sh" > /dev/null
             timeout "${E2E_LIMIT:-240}" python3 "$here/e2e_no_table.py" --synthetic "${E2E_ARCH:-llama-3-8b}" --formats w4a16 \
               --workloads decode_bound --runs 3 $E2E_EXTRA --output "$OUT/e2e_notable_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" 2>&1 \
               | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
               | tee "$OUT/e2e_notable_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "search|tuned|TPOT|FAILED|Error|error" \
               | cut -c1-300 ;;
    *) STAGES=$stage bash "$here/../kernels_s33/run.sh" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
