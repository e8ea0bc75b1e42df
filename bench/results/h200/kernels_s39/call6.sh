set -o pipefail
# Session 39, call 6: GPU tests of the other modules whose ctypes launch now takes cuda_build.stream_handle (the VPTQ
# GEMV, the W4A16 tensor-core GEMV's fused decode forms, its wide and shared-tile builds).
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
timeout 500 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_vptq.py tests/test_s7_decode_fused.py \
  tests/test_s8_w4a16_wide.py tests/test_s9_decode_silu.py tests/test_w4a16_shared_tile.py tests/test_w4a16_cuda.py \
  2>&1 | tail -4 | tee $OUT/gpu_tests.log
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
