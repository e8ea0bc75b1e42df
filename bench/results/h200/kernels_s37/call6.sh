set -o pipefail
# Session 37, call 6: the W4A16 table with the launch configs as committed: call 5's 8-token configs for 5..8 tokens
# and, under key 4, the one-token configs at 2..4 tokens where calls 3 and 5 measured them faster there.
R=bench/results/h200/kernels_s37/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
TABLE_ARGS="--suite w4a16" TABLE_LIMIT=130 STAGES=table bash $R
STAGES=pack bash $R > /dev/null
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
