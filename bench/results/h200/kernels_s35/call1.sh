set -o pipefail
# Session 35, call 1: the WS GEMV's GPU tests (the new dependents-first test among them), then chain_ab.py on
# synthetic Llama-3-8B W4A16, every arm.
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
TESTS=tests/test_w4a16_ws.py TEST_LIMIT=170 STAGES=tests bash $R 2>&1 | tail -4
CHAIN_LIMIT=330 STAGES=chain bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
