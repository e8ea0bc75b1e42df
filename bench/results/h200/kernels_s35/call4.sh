set -o pipefail
# Session 35, call 4: dependents first on one CTA an SM for chosen layer shapes only (the small q/k/v and o layers),
# the large ones as shipped: chain_ab.py on synthetic Llama-3-8B and Qwen3-8B W4A16.
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
CHAIN_ARMS="shipped smallfirst1 ofirst1 qkvfirst1 smallfirst downfirst1" CHAIN_LIMIT=200 STAGES=chain bash $R
SHAPES_ARCH=qwen3-8b CHAIN_TAG=_qwen3 CHAIN_ARMS="shipped smallfirst1 ofirst1 qkvfirst1" CHAIN_LIMIT=150 STAGES=chain bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
