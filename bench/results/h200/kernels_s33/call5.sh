set -o pipefail
# Session 33, call 5: the WS GEMV's launch config per layer shape inside the decode graph (ws_graph_cfg.py) on
# Qwen3-8B and the Llama-3-70B layer shapes, where call 4's --tune-paths kept another GEMV family on some shapes.
R=bench/results/h200/kernels_s33/run.sh
STAGES="kcache" bash $R 2>&1 | tail -1
SHAPES_ARCH=qwen3-8b WSCFG_TAG=_qwen3 WSCFG_LIMIT=200 STAGES="wscfg" bash $R 2>&1 | tail -8
SHAPES_ARCH=llama-3-70b-layers WSCFG_TAG=_70b WSCFG_LIMIT=220 STAGES="wscfg" bash $R 2>&1 | tail -8
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
