set -o pipefail
# Session 37, call 3: main's tensor-core W4A16 GEMV (the staging and copy-address changes, no offset dequantization:
# the same SASS as call 2's "s37 sub" arm) -- its GPU tests, then the W4A16 kernel table on it.
R=bench/results/h200/kernels_s37/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache base" bash $R 2>&1 | tail -4
TESTS="tests/test_w4a16_cuda.py tests/test_s8_w4a16_wide.py tests/test_w4a16_shared_tile.py tests/test_s7_decode_fused.py tests/test_s9_decode_silu.py" \
  TEST_LIMIT=240 STAGES=tests bash $R 2>&1 | tail -4
TABLE_ARGS="--suite w4a16" TABLE_LIMIT=200 STAGES=table bash $R
STAGES=pack bash $R > /dev/null
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
