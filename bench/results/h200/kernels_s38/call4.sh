set -o pipefail
# Session 38, call 4: the kernels' public functions call their launchers directly in eager PyTorch
# (kernels/op_dispatch.py). GPU tests of every touched module, eager_probe.py again, and an eager (no CUDA graph)
# end-to-end generation with the custom op path forced (COMPRESS_KERNEL_DISPATCH=op) against the direct one.
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_op_dispatch.py tests/test_w4a16_ws.py \
  tests/test_w4a16_cc.py tests/test_w4a16_ws_gemm.py tests/test_i8_gemv.py tests/test_sp24_w16_gemv.py \
  tests/test_kernels_w8a8.py tests/test_kernels_w4a16.py tests/test_kernels_sparse24.py tests/test_kernels_vptq.py \
  tests/test_runtime_formats.py tests/test_w4a16_cuda.py 2>&1 | tail -15 | tee $OUT/gpu_tests.log
echo "tests done at $SECONDS s"
timeout 100 python3 bench/results/h200/kernels_s38/eager_probe.py $OUT/eager.json 2>&1 | grep -v -E "warn|^ *$" \
  | grep "M=" | tee $OUT/eager.log | cut -c1-200
for mode in op direct op direct; do
  COMPRESS_KERNEL_DISPATCH=$mode timeout 150 python3 -m compress.bench.e2e --synthetic llama-3-8b --formats w4a16 \
    --workloads interactive --runs 2 --no-cuda-graphs --output $OUT/e2e_eager_$mode$SECONDS 2>&1 \
    | grep -E "TPOT|TTFT|interactive|w4a16" | head -8 | cut -c1-200
  echo "e2e $mode done at $SECONDS s"
  [ $SECONDS -gt 520 ] && break
done
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
