set -o pipefail
# Session 36, call 1: the WS GEMM's cluster reduction (kernels/csrc/w4a16_ws_gemm.cu, flags bit 2): a smoke launch per
# config, its GPU tests (and the tensor-core GEMV's, whose launch now goes through launch_ex.cuh), then cluster_ab.py.
R=bench/results/h200/kernels_s36/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache smoke" bash $R 2>&1 | tail -16
TESTS="tests/test_w4a16_ws_gemm.py tests/test_w4a16_cuda.py" TEST_LIMIT=200 STAGES=tests bash $R 2>&1 | tail -4
AB_LIMIT=230 STAGES=cluster bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
