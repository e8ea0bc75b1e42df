set -o pipefail
# Session 34, call 1 (main at 7e3f97e's successors): the WS GEMV's config argument and the int8 GEMV on the GPU (tests);
# the int8 GEMV's dense mode against the runtime's W8A8 paths at 1-64 tokens (w8a8_i8.py); W4A16 decode on the 8B
# shapes as shipped (the WS configs' search must leave the H200's paths as they were).
R=bench/results/h200/kernels_s34/run.sh
TESTS="tests/test_w4a16_ws.py tests/test_i8_gemv.py" TEST_LIMIT=150 STAGES="kcache tests" bash $R 2>&1 | tail -5
I8_LIMIT=300 STAGES="i8" bash $R 2>&1 | tail -75
E2E_LIMIT=110 STAGES="e2e" bash $R 2>&1 | grep -E "TPOT [0-9]|done" | cut -c1-300
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
