set -o pipefail
# Session 35, call 7: the WS GEMV on a persistent grid that gives every CTA the same number of row groups (call 6's
# lead): single calls and the 8B decode step (grid_ab.py).
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
STAGES=grid bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
