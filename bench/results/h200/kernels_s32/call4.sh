set -o pipefail
# Session 32, call 4: the L2 prefetch of the next layer's weights (kernels/csrc/l2_prefetch.cuh) in the decode step:
# ablate arms pf0/pf8/pf16/pf32 (same process), the GPU tests of the touched kernels, then `compress bench e2e`
# decode_bound with the default (16 MB) and with COMPRESS_DECODE_L2_PREFETCH_MB=0.
R=bench/results/h200/kernels_s32/run.sh
ABLATE_PROFILE_ARM=pf16 ABLATE_ARMS="pf0 pf16 pf8 pf32 pf0 pf16 pf4" ABLATE_LIMIT=200 STAGES="kcache ablate" bash $R 2>&1 | tail -12
STAGES="tests" TEST_LIMIT=200 TESTS="tests/test_l2_prefetch.py tests/test_w4a16_cc.py tests/test_w4a16_ws.py tests/test_w4a16_ws_gemm.py tests/test_s7_decode_fused.py" \
  bash $R 2>&1 | grep -E "passed|failed|FAILED|stage|Error" | tail -15
E2E_TAG=_db_pf16 E2E_LIMIT=90 STAGES="e2e" bash $R 2>&1 | tail -4
COMPRESS_DECODE_L2_PREFETCH_MB=0 E2E_TAG=_db_pf0 E2E_LIMIT=90 STAGES="e2e" bash $R 2>&1 | tail -4
STAGES=pack bash $R > /dev/null 2>&1
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
