set -o pipefail
# Session 40, call 2 (kind nvidia-h200; two GPUs were not lent at the time): the device fix on one GPU: the launchers'
# and the runtime's GPU tests (launch_ex.cuh's per-device attributes rebuilt into every CUDA library), the CUDA-graph
# decode step (should not move), and the host cost of the device guard (guard_cost.py).
touch /tmp/call_start
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
python3 bench/kernel_cache.py unpack .kcache/vptq.tar.xz 2>&1 | tail -1
timeout 100 python3 bench/results/h200/kernels_s40/guard_cost.py $OUT/guard_cost.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/guard_cost.log
echo "guard cost done at $SECONDS s"
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_launch_host_cost.py \
  tests/test_w4a16_ws.py tests/test_w4a16_cc.py tests/test_w4a16_ws_gemm.py tests/test_i8_gemv.py tests/test_sp24_w16_gemv.py \
  tests/test_vptq_gemm_cuda.py tests/test_s8_vptq_cluster.py tests/test_op_dispatch.py tests/test_runtime_formats.py \
  tests/test_runtime_fastpath.py tests/test_kernels_vptq.py > $OUT/gpu_tests.log 2>&1
tail -4 $OUT/gpu_tests.log | cut -c1-300
echo "tests done at $SECONDS s"
timeout $((575 - SECONDS)) python3 -m compress.bench.e2e --synthetic llama-3-8b --formats w4a16 --workloads decode_bound \
  --runs 3 --output $OUT/e2e_graphs 2>&1 | grep -E "decode_bound|bound" | head -4 | cut -c1-220
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
