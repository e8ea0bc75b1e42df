set -o pipefail
# Session 39, call 5: the committed tree (fe888b0 + results) with its libraries: GPU tests of the launchers and the
# runtime, the CUDA-graph decode step (should not move: a replay makes no host calls), and the eager command for
# fp16 / W4A16 / W8A8 (the CLI, alternate formats in one process each run).
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
timeout 260 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_launch_host_cost.py tests/test_w4a16_ws.py \
  tests/test_w4a16_cc.py tests/test_w4a16_ws_gemm.py tests/test_i8_gemv.py tests/test_sp24_w16_gemv.py \
  tests/test_vptq_gemm_cuda.py tests/test_s8_vptq_cluster.py tests/test_runtime_formats.py tests/test_op_dispatch.py \
  2>&1 | tail -4 | tee $OUT/gpu_tests.log
echo "tests done at $SECONDS s"
timeout 150 python3 -m compress.bench.e2e --synthetic llama-3-8b --formats w4a16 --workloads decode_bound --runs 3 \
  --output $OUT/e2e_graphs 2>&1 | grep -E "decode_bound|bound" | head -4 | cut -c1-220
echo "e2e graphs done at $SECONDS s"
timeout $((560 - SECONDS)) python3 -m compress.bench.e2e --synthetic llama-3-8b --formats fp16,w4a16,w8a8 \
  --workloads interactive --runs 3 --no-cuda-graphs --output $OUT/e2e_eager 2>&1 | grep -E "interactive" | head -6 | cut -c1-260
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
