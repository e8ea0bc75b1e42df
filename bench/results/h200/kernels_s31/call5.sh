set -o pipefail
R=bench/results/h200/kernels_s31/run.sh
STAGES="kcache wsmbuild wsmcheck tests" TESTS="tests/test_w4a16_ws_gemm.py" TEST_LIMIT=120 bash $R 2>&1 | grep -E "check config|passed|failed|stage" | tail -20
WSM_M="1 2 8 16" WSM_LIMIT=150 STAGES="wsm" bash $R 2>&1 | grep -v "^    " | tail -42
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
