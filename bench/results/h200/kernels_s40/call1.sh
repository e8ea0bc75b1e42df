set -o pipefail
# Session 40, call 1 (kind nvidia-h200-x2): every format's kernel paths and a CUDA-graph generation on the second GPU
# while the first stays current (tests/test_second_gpu.py), on the tree as it was before any fix.
touch /tmp/call_start
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
nvidia-smi -L | tee $OUT/gpus.txt
timeout 540 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_second_gpu.py 2>&1 \
  | tee $OUT/second_gpu.log | grep -E "passed|failed|path calls failed|Error|error" | cut -c1-300 | head -60
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
