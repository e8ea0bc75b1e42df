#!/bin/bash
# Session 33 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tune wscfg pack" bash bench/results/h200/kernels_s33/run.sh
# Stages of its own (every other stage is kernels_s32/run.sh's: kcache, tests, table, e2e, ablate, pack, ...):
# tune: `compress bench e2e --tune-paths` on synthetic E2E_ARCH (E2E_FORMATS, default w4a16; E2E_WORKLOADS, default
#   decode_bound; E2E_TAG names the folder);
# tunemem: tune_mem.py (GPU memory allocated through --tune-paths's trials);
# wscfg: ws_graph_cfg.py (the WS GEMV's launch config per layer shape, chosen inside the decode step's graph),
#   $OUT/wscfg${WSCFG_TAG}.json, configs WSCFG_CONFIGS (default all).
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    tune) . "$here/../../h100/device_env.sh" > /dev/null
          timeout "${E2E_LIMIT:-240}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" --formats "${E2E_FORMATS:-w4a16}" \
            --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 --tune-paths --output "$OUT/tune_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" \
            2>&1 | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
            | tee "$OUT/tune_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "tuned|TPOT|bound|FAILED|Error|error|wrote" \
            | cut -c1-260 ;;
    tunemem) . "$here/../../h100/device_env.sh" > /dev/null
             timeout "${MEM_LIMIT:-180}" python3 "$here/tune_mem.py" 2>&1 | grep -v -E "warn|^ *$" | tee "$OUT/tune_mem.log" \
               | grep -E "GB|Error|error" ;;
    wscfg) . "$here/../../h100/device_env.sh" > /dev/null
           timeout "${WSCFG_LIMIT:-300}" python3 "$here/ws_graph_cfg.py" "$OUT/wscfg${WSCFG_TAG}.json" $WSCFG_CONFIGS 2>&1 \
             | grep -v -E "warn|^ *$" | tee "$OUT/wscfg${WSCFG_TAG}.log" | grep -E "shapes|->|A/B|Error|error" ;;
    *) STAGES=$stage bash "$here/../kernels_s32/run.sh" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
