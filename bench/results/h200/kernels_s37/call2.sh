set -o pipefail
# Session 37, call 2: call 1 again with every library prebuilt (call 1's `base` stage did not unpack, so the A/B and
# the tests compiled on the GPU machine and both ran out of time), and a third A/B arm: this session's kernel with
# -DW4_OFFSET=0 (the staging and copy-address changes without the offset dequantization).
R=bench/results/h200/kernels_s37/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache base" bash $R 2>&1 | tail -4
TESTS="tests/test_w4a16_cuda.py tests/test_s8_w4a16_wide.py tests/test_w4a16_shared_tile.py tests/test_s7_decode_fused.py tests/test_s9_decode_silu.py" \
  TEST_LIMIT=240 STAGES=tests bash $R 2>&1 | tail -4
AB_LIMIT=200 STAGES=offset bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
