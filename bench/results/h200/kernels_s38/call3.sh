set -o pipefail
# Session 38, call 3: the host cost of a call of each public kernel in eager PyTorch (eager_probe.py).
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
timeout 300 python3 bench/results/h200/kernels_s38/eager_probe.py $OUT/eager.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/eager.log | cut -c1-200
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
