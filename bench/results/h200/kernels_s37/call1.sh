set -o pipefail
# Session 37, call 1: the tensor-core W4A16 GEMV's offset dequantization, staging and copy addresses
# (kernels/csrc/w4a16_gemv.cu): its GPU tests, then offset_ab.py against session 36's source.
R=bench/results/h200/kernels_s37/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache base" bash $R 2>&1 | tail -4
TESTS="tests/test_w4a16_cuda.py tests/test_s8_w4a16_wide.py tests/test_w4a16_shared_tile.py tests/test_s7_decode_fused.py tests/test_s9_decode_silu.py" \
  TEST_LIMIT=200 STAGES=tests bash $R 2>&1 | tail -4
AB_LIMIT=150 STAGES=offset bash $R
AB_LIMIT=100 AB_TAG=_cases AB_M="1 16" AB_REPEAT=1 AB_CASES="fp16:128:asym bf16:128:sym fp16:64:asym" STAGES=offset bash $R | tail -3
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
