#!/bin/bash
# Session 21 device calls (repository root, kind nvidia-h100-x1; $OUT from the device tool):
#   STAGES="tests vptq" bash bench/results/h100/kernels_s21/run.sh
. "$(dirname "$0")/../device_env.sh"
for stage in $STAGES; do
  case $stage in
    tests) timeout "${TEST_LIMIT:-150}" python3 -m pytest -q -m gpu ${TESTS:-tests/test_vptq_gemm.py} 2>&1 | tail -15 | tee "$OUT/pytest.log" ;;
    vptq|w8a16) PROBE_JSON="$OUT/probe_$stage.json" timeout "${PROBE_LIMIT:-400}" python3 bench/results/h100/kernels_s21/probe.py $stage 2>&1 \
                  | tee "$OUT/probe_$stage.log" | grep --line-buffered -v "^  " ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
