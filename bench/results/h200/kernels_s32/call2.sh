set -o pipefail
# Session 32, call 2: ablate (fixed), then the lean WS GEMM consumer: build, its tests, and the same timing as call 1.
# Its "lean" stage copied branch s31-wsm-lean's kernels/csrc/w4a16_ws_gemm.cu over main's (since d36b85b main's own
# source, so the stage is gone from run.sh: on main, run the same line without it).
R=bench/results/h200/kernels_s32/run.sh
ABLATE_LIMIT=240 STAGES="kcache ablate" bash $R 2>&1 | tail -45
STAGES="lean wsmbuild tests" TESTS="tests/test_w4a16_ws_gemm.py" TEST_TAG=_lean TEST_LIMIT=150 bash $R 2>&1 \
  | grep -E "passed|failed|FAILED|stage|Error|real" | tail -15
WSM_CONFIGS="0 3 9" WSM_M="2 8 16" WSM_LIMIT=80 WSM_TAG=_lean STAGES="wsm" bash $R 2>&1 | grep -v "^    " | tail -32
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
