set -o pipefail
# Session 35, call 6: Nsight Compute on the warp-specialized W4A16 GEMV at one token (served configs, 8B gate/up,
# fused gate_up, q/o): issue, stall reasons, memory, for the next session.
R=bench/results/h200/kernels_s35/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
STAGES=wsncu bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
