set -o pipefail
# Session 36, call 4: the W4A16, W8A8 and 2:4 kernel tables on this session's code (the H200's last full tables:
# W4A16 session 31, W8A8 session 27, 2:4 session 26).
R=bench/results/h200/kernels_s36/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
TABLE_ARGS="--suite w4a16 --suite w8a8 --suite sparse24" TABLE_LIMIT=480 STAGES=table bash $R
STAGES=pack bash $R > /dev/null
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
