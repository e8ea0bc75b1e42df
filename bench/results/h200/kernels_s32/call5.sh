set -o pipefail
# Session 32, call 5: GPU tests (L2 hints, the one-launch decode attention, the fused-GEMV tests call 4's limit cut),
# a same-process A/B with the path table kept (attention one vs two launches; L2 prefetch 0/2/4/8 MB), then
# `compress bench e2e` decode_bound as shipped (prefetch off, the path table choosing the attention launch).
R=bench/results/h200/kernels_s32/run.sh
STAGES="kcache tests" TEST_LIMIT=170 TESTS="tests/test_l2_prefetch.py tests/test_glue_kernels.py tests/test_runtime_fastpath.py tests/test_s7_decode_fused.py" \
  bash $R 2>&1 | grep -E "passed|failed|FAILED|stage|Error" | tail -15
ABLATE_KEEP_PATHS=1 ABLATE_PROFILE_ARM=attn1 ABLATE_ARMS="pf0 attn2 attn1 attn2 attn1 pf4 pf0 pf2 pf8 pf0 pf4" ABLATE_LIMIT=230 \
  STAGES="ablate" bash $R 2>&1 | tail -13
E2E_TAG=_db E2E_LIMIT=100 STAGES="e2e pack" bash $R 2>&1 | tail -4
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
