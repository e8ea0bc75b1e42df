set -o pipefail
# Session 34, call 4 (graph_tune's second pass; the path table's VARIANT_MARGIN): W4A16 decode without the WS GEMV's H200
# configs (e2e_no_table.py): the 8B and 70B layer shapes with --tune-paths, Qwen3-8B without.
R=bench/results/h200/kernels_s34/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
E2E_TAG=_tune E2E_EXTRA=--tune-paths E2E_LIMIT=260 STAGES="notable" bash $R 2>&1 | grep -E "tuned|TPOT [0-9]|done" | cut -c1-240
E2E_ARCH=qwen3-8b E2E_LIMIT=100 STAGES="notable" bash $R 2>&1 | grep -E "search|TPOT [0-9]|done" | cut -c1-300
E2E_ARCH=llama-3-70b-layers E2E_TAG=_tune E2E_EXTRA=--tune-paths E2E_LIMIT=200 STAGES="notable" bash $R 2>&1 \
  | grep -E "tuned|TPOT [0-9]|done" | cut -c1-240
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
