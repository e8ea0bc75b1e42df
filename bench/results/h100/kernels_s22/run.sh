#!/bin/bash
# Session 22 device calls (repository root, kind nvidia-h100-x1; $OUT from the device tool):
#   STAGES="tests w8a16 e2e" bash bench/results/h100/kernels_s22/run.sh
. "$(dirname "$0")/../device_env.sh"
for stage in $STAGES; do
  case $stage in
    tests) timeout "${TEST_LIMIT:-150}" python3 -m pytest -q -m gpu ${TESTS:-tests/test_w8a16_prefill.py} 2>&1 | tail -15 | tee "$OUT/pytest.log" ;;
    w8a16) PROBE_JSON="$OUT/probe_w8a16_tiled.json" timeout "${PROBE_LIMIT:-300}" \
             python3 bench/results/h100/kernels_s22/probe_w8a16_tiled.py 2>&1 | tee "$OUT/probe_w8a16_tiled.log" | grep --line-buffered -v "^    " ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic llama-3-8b --formats ${FORMATS:-w8a16,fp16} \
           --workloads ${WORKLOADS:-prefill_bound,decode_bound,medium_batch,base} --runs ${RUNS:-2} --output "$OUT/e2e" 2>&1 \
           | tail -60 > "$OUT/e2e.log"; tail -5 "$OUT/e2e.log" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
