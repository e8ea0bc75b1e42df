set -o pipefail
# Session 36, call 3: the warp stall reasons of the WS GEMM at 8 and 16 tokens and of the one-token WS GEMV (call 2 found
# all three latency-bound: 2.25 / 2.25 / 4.3 warps a scheduler, 5.9-7.3 cycles between a warp's instructions), then the
# issue-5 decode of synthetic Llama-3-8B W4A16 after this session's launcher changes.
R=bench/results/h200/kernels_s36/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
STAGES=stalls bash $R
E2E_FORMATS=w4a16 E2E_LIMIT=200 STAGES=e2e bash $R
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
