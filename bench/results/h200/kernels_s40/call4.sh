set -o pipefail
# Session 40, call 4 (kind nvidia-h200-x2): at 2d5c3d4. Timing first, one thing at a time on GPU 0: guard_cost.py (the
# device guard alone and on a launch), eager_ab.py (eager decode step: fp16 / W8A8 / W4A16 prepared / W4A16 with
# session 39's launch, in turns). Then tests/test_second_gpu.py on both GPUs, and beside it on GPU 0 the GPU tests of
# the prepared launch and of the runtime's path cache.
touch /tmp/call_start
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
python3 bench/kernel_cache.py unpack .kcache/vptq.tar.xz 2>&1 | tail -1
nvidia-smi -L | tee $OUT/gpus.txt
timeout 100 python3 bench/results/h200/kernels_s40/guard_cost.py $OUT/guard_cost.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/guard_cost.log
echo "guard cost done at $SECONDS s"
AB_ROUNDS=5 AB_STEPS=30 timeout 200 python3 bench/results/h200/kernels_s40/eager_ab.py $OUT/eager_ab.json 2>&1 \
  | grep -v -E "warn|^ *$" | tee $OUT/eager_ab.log
echo "eager ab done at $SECONDS s"
CUDA_VISIBLE_DEVICES=0 timeout $((560 - SECONDS)) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_w4a16_ws.py \
  tests/test_runtime_path_cache.py tests/test_op_dispatch.py > $OUT/gpu_tests.log 2>&1 &
tests=$!
timeout $((560 - SECONDS)) python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_second_gpu.py > $OUT/second_gpu.log 2>&1
tail -2 $OUT/second_gpu.log | cut -c1-300; grep -E "path calls failed|^E " $OUT/second_gpu.log | head -20 | cut -c1-300
wait $tests; tail -2 $OUT/gpu_tests.log | cut -c1-300; grep -E "^FAILED|^E " $OUT/gpu_tests.log | head -10 | cut -c1-300
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
