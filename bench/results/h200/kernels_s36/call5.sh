set -o pipefail
# Session 36, call 5 (branch s36-wsm-rt4): two WS GEMM configs of 4 row tiles a warp (64-row groups, 512-byte
# spans, 3-4 stages): more independent mma chains a warp, for the latency-bound 8-16 tokens (calls 2-3). Built here
# (wsmbuild), smoke-launched, tested, then timed against configs 0, 6 and 10 (cluster_ab.py).
R=bench/results/h200/kernels_s36/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache wsmbuild smoke" bash $R 2>&1 | tail -20
TESTS="tests/test_w4a16_ws_gemm.py" TEST_LIMIT=200 STAGES=tests bash $R 2>&1 | tail -3
AB_CONFIGS="0 6 10 12 13" AB_TAG=_rt4 AB_LIMIT=200 STAGES=cluster bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
