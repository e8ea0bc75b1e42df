set -o pipefail
# Session 32, call 1: the decode step's launches inside the graph (ablate), the GPU tests of session 31's unverified
# commits on main, and the WS GEMM timing on main (the A/B base for the lean consumer).
R=bench/results/h200/kernels_s32/run.sh
ABLATE_LIMIT=220 STAGES="kcache ablate" bash $R 2>&1 | tail -45
STAGES="tests" TESTS="tests/test_w4a16_ws_gemm.py tests/test_w4a16_cc.py tests/test_w4a16_ws.py" TEST_LIMIT=200 bash $R 2>&1 \
  | grep -E "passed|failed|FAILED|stage|Error" | tail -15
WSM_CONFIGS="0 3 9" WSM_M="2 8 16" WSM_LIMIT=80 WSM_TAG=_main STAGES="wsm" bash $R 2>&1 | grep -v "^    " | tail -32
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
