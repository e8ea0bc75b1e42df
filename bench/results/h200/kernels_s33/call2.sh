set -o pipefail
# Session 33, call 2: GPU memory through --tune-paths (tune_mem.py); --tune-paths on fp16 and W8A8 (synthetic
# Llama-3-8B, decode_bound).
R=bench/results/h200/kernels_s33/run.sh
MEM_LIMIT=170 STAGES="kcache tunemem" bash $R 2>&1 | tail -30
E2E_FORMATS=fp16,w8a8 E2E_LIMIT=330 STAGES="tune" bash $R 2>&1 | tail -40
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
