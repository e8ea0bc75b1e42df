set -o pipefail
# Session 33, call 3 (main at the fixes of calls 1-2): the re-capture memory test on the GPU; GPU memory through
# --tune-paths again (tune_mem.py); --tune-paths on the 70B layer shapes and on Qwen3-8B (W4A16, decode_bound).
R=bench/results/h200/kernels_s33/run.sh
TESTS="tests/test_runtime_fastpath.py tests/test_path_force.py" TEST_K="recapturing or forced or prefer" TEST_LIMIT=120 \
  STAGES="kcache tests" bash $R 2>&1 | tail -6
MEM_LIMIT=150 STAGES="tunemem" bash $R 2>&1 | tail -8
E2E_ARCH=llama-3-70b-layers E2E_LIMIT=150 STAGES="tune" bash $R 2>&1 | grep -E "tuned|TPOT [0-9]|GB/s|done" | cut -c1-300
E2E_ARCH=qwen3-8b E2E_LIMIT=200 STAGES="tune" bash $R 2>&1 | grep -E "tuned|TPOT [0-9]|GB/s|done" | cut -c1-300
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
