set -o pipefail
# Session 40, call 3 (kind nvidia-h200-x2): tests/test_second_gpu.py on two GPUs with the device fix (GPU 0 current,
# every path of every format and a CUDA-graph generation on GPU 1); guard_cost.py with its forward arm corrected.
touch /tmp/call_start
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
python3 bench/kernel_cache.py unpack .kcache/vptq.tar.xz 2>&1 | tail -1
nvidia-smi -L | tee $OUT/gpus.txt
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_second_gpu.py > $OUT/second_gpu.log 2>&1
tail -3 $OUT/second_gpu.log | cut -c1-300; grep -E "path calls failed|^E " $OUT/second_gpu.log | head -30 | cut -c1-300
echo "second gpu done at $SECONDS s"
timeout 100 python3 bench/results/h200/kernels_s40/guard_cost.py $OUT/guard_cost.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/guard_cost.log
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
