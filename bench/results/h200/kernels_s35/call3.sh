set -o pipefail
# Session 35, call 3: the WS GEMV's "tree" build (a chunk's four words summed in a tree): GPU tests, single calls
# against the shipped build, then the decode step (chain_ab.py) on synthetic Llama-3-8B and Qwen3-8B W4A16.
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
TESTS=tests/test_w4a16_ws.py TEST_LIMIT=150 STAGES=tests bash $R 2>&1 | tail -3
STAGES=tree bash $R
CHAIN_ARMS="shipped tree treefirst1" CHAIN_LIMIT=150 STAGES=chain bash $R
SHAPES_ARCH=qwen3-8b CHAIN_TAG=_qwen3 CHAIN_ARMS="shipped tree" CHAIN_LIMIT=150 STAGES=chain bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
