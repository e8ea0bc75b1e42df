#!/bin/bash
# Session 23 device calls (repository root, kind nvidia-h100-x1; $OUT from the device tool):
#   STAGES="tests layout" bash bench/results/h100/kernels_s23/run.sh
. "$(dirname "$0")/../device_env.sh"
for stage in $STAGES; do
  case $stage in
    tests) timeout "${TEST_LIMIT:-150}" python3 -m pytest -q -m gpu ${TESTS:-tests/test_w8a16_prefill.py} 2>&1 | tail -15 | tee "$OUT/pytest.log" ;;
    layout) timeout "${LAYOUT_LIMIT:-300}" python3 bench/results/h100/kernels_s23/layout_probe.py "$OUT/layout_probe.json" $LAYOUT_SHAPES \
              2>&1 | tee "$OUT/layout_probe.log" ;;
    block) timeout "${BLOCK_LIMIT:-300}" python3 bench/results/h100/kernels_s23/block_probe.py "$OUT/block_probe.json" $BLOCK_SHAPES \
              2>&1 | tee "$OUT/block_probe.log" ;;
    table) timeout "${TABLE_LIMIT:-400}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite sparse24} --output "$OUT/kernels" 2>&1 \
             | tail -40 > "$OUT/table.log"; tail -12 "$OUT/table.log" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
