set -o pipefail
# Session 35, call 2: the WS GEMV's GPU tests again (the producer's L2 prefetch added), then chain_ab.py on synthetic
# Llama-3-8B W4A16 with the prefetch arms.
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
TESTS="tests/test_w4a16_ws.py tests/test_w4a16_ws_gemm.py" TEST_LIMIT=200 STAGES=tests bash $R 2>&1 | tail -4
CHAIN_ARMS="shipped pf1 pf2 pf4 first1 cap1pf2 first1pf1 first1pf2 first1pf4 first2c9 first2c9pf2" CHAIN_LIMIT=300 \
  STAGES=chain bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
