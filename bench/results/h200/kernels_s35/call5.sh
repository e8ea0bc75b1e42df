set -o pipefail
# Session 35, call 5: one launch_ex for the CUDA C++ kernels (kernels/csrc/launch_ex.cuh; i8_gemv.cu and sp24_w16_gemv.cu
# had their own copies): the GPU tests of every library that includes it, then the issue-5 decode on synthetic
# Llama-3-8B in the formats that run those kernels.
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
TESTS="tests/test_i8_gemv.py tests/test_sp24_w16_gemv.py tests/test_w4a16_cc.py tests/test_w4a16_ws.py tests/test_w4a16_ws_gemm.py" \
  TEST_LIMIT=330 STAGES=tests bash $R 2>&1 | tail -3
E2E_FORMATS=w4a16,w8a8,w8a16-sparse24 E2E_LIMIT=200 STAGES=e2e bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
