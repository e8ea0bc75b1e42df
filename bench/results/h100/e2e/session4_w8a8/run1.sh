#!/usr/bin/env bash
# Needs the earlier sources from git history first: `bash bench/results/baselines.sh` here, then carry the paths it prints.
# Session 4, W8A8 decode helper: device call 1 (H100). Usage (repository root): bash THIS_FILE OUTDIR
# 1. before vs now in one process on the synthetic Llama-3-8B W8A8 (ab_e2e.py: e2e decode_bound, 3 runs each,
#    profile of one decode step); 2. the int8 GEMV tilings and the layer launch sequence as graph replays
#    (gemv_bench.py); 3. tests/test_glue_kernels.py on the GPU. Each step has its own time limit.
set -o pipefail
out=$1
mkdir -p "$out"
d=bench/results/h100/e2e/session4_w8a8
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$out/gpu.txt"
quiet() { grep -v "Warning\|warn\|^ *$\|USDT\|profiler\|^\s*warnings\|Online softmax\|split the reduction\|important use case\|^softmax"; }
echo "== [$SECONDS s] ab_e2e"
timeout 190 python3 $d/ab_e2e.py "$out/ab_e2e.json" 3 2>&1 | tee "$out/ab_e2e.log" | quiet | grep -v "^ *[-|]\|Name "
echo "== [$SECONDS s] gemv_bench"
timeout $(( 320 - SECONDS )) python3 $d/gemv_bench.py "$out/gemv_bench.json" 2>&1 | tee "$out/gemv_bench.log" | quiet
t=$(( 345 - SECONDS ))
echo "== [$SECONDS s] pytest glue (timeout $t s)"
[ "$t" -gt 15 ] && timeout $t python3 -m pytest tests/test_glue_kernels.py -q -x 2>&1 | tail -4 | tee "$out/pytest_glue.txt"
echo "== [$SECONDS s] done"
grep -h "^== \|TPOT\|layer  \|fastest" "$out/ab_e2e.log" "$out/gemv_bench.log" | grep -v "^== \[" | head -40
