set -o pipefail
# Session 38, call 5: cuda_build.arch cached per device (every CUDA launcher's library key): GPU tests of the CUDA
# launchers; and the CUDA-graph decode step after the direct launch (kernels/op_dispatch.py), which should not move.
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_w4a16_ws.py tests/test_w4a16_cc.py \
  tests/test_i8_gemv.py tests/test_sp24_w16_gemv.py tests/test_vptq_gemm_cuda.py tests/test_s8_vptq_cluster.py \
  tests/test_w4a16_ws_gemm.py tests/test_op_dispatch.py 2>&1 | tail -4 | tee $OUT/gpu_tests.log
echo "tests done at $SECONDS s"
timeout $((420 - SECONDS)) python3 -m compress.bench.e2e --synthetic llama-3-8b --formats w4a16 --workloads decode_bound \
  --runs 3 --output $OUT/e2e_graphs 2>&1 | grep -E "decode_bound:|bound" | head -4 | cut -c1-220
echo "e2e done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
