#!/usr/bin/env bash
# Session 4, W8A8 decode helper: device call 2 (H100). Usage (repository root): bash THIS_FILE OUTDIR
# 1. the e2e benchmark as the issue states it (fp16 + w8a8, decode_bound, 3 runs, profile);
# 2. before vs now in one process (ab_e2e.py); 3. tests/test_glue_kernels.py on the GPU.
set -o pipefail
out=$1
mkdir -p "$out"
d=bench/results/h100/e2e/session4_w8a8
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$out/gpu.txt"
quiet() { grep -v "Warning\|warn\|^ *$\|USDT\|profiler\|^\s*warnings\|Online softmax\|split the reduction\|important use case\|^softmax"; }
cmd="--synthetic llama-3-8b --formats fp16,w8a8 --workloads decode_bound --runs 3 --profile"
echo "== [$SECONDS s] python3 -m compress.bench.e2e $cmd --output $out/llama-3-8b"
timeout 200 python3 -m compress.bench.e2e $cmd --output "$out/llama-3-8b" 2>&1 | tee "$out/llama-3-8b.log" | quiet \
  | grep -v "^ *[-|]\|Name \|^#\|^\*\*\|^ *- "
rm -f "$out"/llama-3-8b/*.png
echo "== [$SECONDS s] ab_e2e"
timeout $(( 320 - SECONDS )) python3 $d/ab_e2e.py "$out/ab_e2e.json" 3 before,now_pdl 2>&1 | tee "$out/ab_e2e.log" | quiet \
  | grep -v "^ *[-|]\|Name "
t=$(( 345 - SECONDS ))
echo "== [$SECONDS s] pytest glue (timeout $t s)"
[ "$t" -gt 15 ] && timeout $t python3 -m pytest tests/test_glue_kernels.py -q -x 2>&1 | tail -4 | tee -a "$out/ab_e2e.log"
echo "== [$SECONDS s] done"
grep -h "TPOT\|bound\|^== " "$out/llama-3-8b.log" "$out/ab_e2e.log" | grep -v "^== \[" | head -30
