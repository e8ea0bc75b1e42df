set -o pipefail
# Session 33, call 1: `compress bench e2e --tune-paths` on the GPU for the first time (synthetic Llama-3-8B W4A16,
# decode_bound); then the WS GEMV's launch config per layer shape chosen inside the decode graph (ws_graph_cfg.py).
R=bench/results/h200/kernels_s33/run.sh
E2E_LIMIT=200 STAGES="kcache tune" bash $R 2>&1 | tail -12
WSCFG_LIMIT=320 STAGES="wscfg pack" bash $R 2>&1 | tail -14
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
