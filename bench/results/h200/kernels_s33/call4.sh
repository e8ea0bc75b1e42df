set -o pipefail
# Session 33, call 4 (main with PathTable.chosen): --tune-paths again on synthetic Llama-3-8B, the 70B layer shapes and
# Qwen3-8B (W4A16, decode_bound): every int4 key of the decode step is tuned.
R=bench/results/h200/kernels_s33/run.sh
STAGES="kcache" bash $R 2>&1 | tail -1
for a in llama-3-8b llama-3-70b-layers qwen3-8b; do
  E2E_ARCH=$a E2E_LIMIT=170 STAGES="tune" bash $R 2>&1 | grep -E "tuned|TPOT [0-9]|done" | cut -c1-400
done
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
