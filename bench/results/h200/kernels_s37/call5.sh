set -o pipefail
# Session 37, call 5: the W4A16 table with call 4's re-tuned configs (kernels/w4a16_cuda.py TUNED_BY_GPU['H200']:
# bucket 8 from 8-token sweeps, the one-token configs under key 1), then synthetic Llama-3-8B W4A16 end to end at
# batch 1 (decode_bound) and batch 8 (medium_batch, which the 8-token configs serve).
R=bench/results/h200/kernels_s37/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
TABLE_ARGS="--suite w4a16" TABLE_LIMIT=150 STAGES=table bash $R
E2E_FORMATS=w4a16 E2E_WORKLOADS=decode_bound,medium_batch E2E_LIMIT=170 STAGES=e2e bash $R
STAGES=pack bash $R > /dev/null
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
