set -o pipefail
# Session 36, call 2: Nsight Compute on the WS GEMM at 8 and 16 tokens (wsm_ncu_probe.py), after the GPU tests of the
# landed launcher (the reduction picked per GPU table) and its WS GEMM library.
R=bench/results/h200/kernels_s36/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
TESTS="tests/test_w4a16_ws_gemm.py" TEST_K="not every_config" TEST_LIMIT=120 STAGES=tests bash $R 2>&1 | tail -2
STAGES=wsmncu bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
