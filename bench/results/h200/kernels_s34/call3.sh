set -o pipefail
# Session 34, call 3 (the path table's VARIANT_MARGIN): W4A16 decode without the WS GEMV's H200 configs (e2e_no_table.py)
# on the 8B and 70B layer shapes, then on the 8B shapes with --tune-paths (the configs timed inside the graph).
R=bench/results/h200/kernels_s34/run.sh
STAGES="kcache" bash $R 2>&1 | tail -1
E2E_LIMIT=120 STAGES="notable" bash $R 2>&1 | grep -E "search|TPOT [0-9]|done" | cut -c1-300
E2E_ARCH=llama-3-70b-layers E2E_LIMIT=120 STAGES="notable" bash $R 2>&1 | grep -E "search|TPOT [0-9]|done" | cut -c1-300
E2E_TAG=_tune E2E_EXTRA=--tune-paths E2E_LIMIT=280 STAGES="notable" bash $R 2>&1 | grep -E "tuned|TPOT [0-9]|done" | cut -c1-300
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
