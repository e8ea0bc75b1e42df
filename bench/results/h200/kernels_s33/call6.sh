set -o pipefail
# Session 33, call 6 (main with call 5's WS GEMV configs for the fused 70B shapes and Qwen3-8B down):
# `compress bench e2e` as shipped (no --tune-paths) on the 70B layer shapes and Qwen3-8B, W4A16 decode_bound.
R=bench/results/h200/kernels_s33/run.sh
STAGES="kcache" bash $R 2>&1 | tail -1
for a in llama-3-70b-layers qwen3-8b; do
  E2E_ARCH=$a E2E_LIMIT=100 STAGES="e2e" bash $R 2>&1 | grep -E "TPOT [0-9]|done" | cut -c1-300
done
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
