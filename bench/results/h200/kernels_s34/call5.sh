set -o pipefail
# Session 34, call 5: Qwen3-8B W4A16 decode with the shipped WS GEMV configs (the same machine's reference), then without
# them (e2e_no_table.py) with --tune-paths (two passes).
R=bench/results/h200/kernels_s34/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
E2E_ARCH=qwen3-8b E2E_LIMIT=90 STAGES="e2e" bash $R 2>&1 | grep -E "TPOT [0-9]|done" | cut -c1-300
E2E_ARCH=qwen3-8b E2E_TAG=_tune E2E_EXTRA=--tune-paths E2E_LIMIT=200 STAGES="notable" bash $R 2>&1 \
  | grep -E "tuned|TPOT [0-9]|done" | cut -c1-240
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
