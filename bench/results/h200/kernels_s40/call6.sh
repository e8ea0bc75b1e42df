set -o pipefail
# Session 40, call 6 (kind nvidia-h200): the three files with failures in call 5 (whose full logs that call's script
# lost), again with the failures' tracebacks.
touch /tmp/call_start
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
for f in tests/test_w4a16_cc.py tests/test_runtime_formats.py tests/test_runtime_fastpath.py; do
  timeout $((280 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -W ignore $f > $OUT/$(basename $f .py).log 2>&1
  tail -1 $OUT/$(basename $f .py).log
  grep -E "^E   |^FAILED|Error" $OUT/$(basename $f .py).log | head -12 | cut -c1-300
done
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
