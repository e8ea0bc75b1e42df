#!/bin/bash
# Sessions 19-20: the seven-workload end-to-end tables on the current tree (the kept full tables,
# bench/results/h100/e2e/llama-3-8b/ etc., were session 1's). One device call per format list:
#   ARCH=llama-3-8b FORMATS=fp16,w4a16,w8a8,fp8 WORKLOADS=all PROFILE=1 LIMIT=560 bash bench/results/h100/e2e/session20/run.sh
# (repository root, kind nvidia-h100-x1; $OUT from the device tool). The report is rewritten after every model, so a
# call stopped at LIMIT keeps every finished model. Reports of separate calls are merged afterwards with
#   python -m compress.bench.e2e_report OUT_DIR A/e2e.json B/e2e.json ...
. "$(dirname "$0")/../../device_env.sh"
ARCH=${ARCH:-llama-3-8b}
timeout "${LIMIT:-560}" python3 -m compress.bench.e2e --synthetic "$ARCH" --formats "$FORMATS" \
  --workloads "${WORKLOADS:-all}" --runs 3 ${PROFILE:+--profile} --output "$OUT/$ARCH" 2>&1 \
  | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once|Profiler clears" \
  | tee "$OUT/$ARCH.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|skipped|wrote" | cut -c1-260
echo "rc ${PIPESTATUS[0]} after $SECONDS s"
