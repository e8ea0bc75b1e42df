set -o pipefail
# Session 34, call 6 (the path choices file): `compress bench e2e` 8B W4A16 decode_bound with --save-paths, then the
# same in a new process with COMPRESS_PATH_CHOICES set to that file.
R=bench/results/h200/kernels_s34/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
timeout 90 python3 -m compress.bench.e2e --synthetic llama-3-8b --formats w4a16 --workloads decode_bound --runs 3 \
  --save-paths $OUT/paths.json --output $OUT/e2e_save 2>&1 | grep -E "TPOT [0-9]|wrote [0-9]|Error" | cut -c1-250
COMPRESS_PATH_CHOICES=$OUT/paths.json timeout 90 python3 -m compress.bench.e2e --synthetic llama-3-8b --formats w4a16 \
  --workloads decode_bound --runs 3 --output $OUT/e2e_load 2>&1 | grep -E "TPOT [0-9]|Error" | cut -c1-250
grep -c '"chosen"' $OUT/paths.json; grep -o '"gpu": "[^"]*"' $OUT/paths.json
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
