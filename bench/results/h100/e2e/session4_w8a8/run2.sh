#!/usr/bin/env bash
# Needs the earlier sources from git history first: `bash bench/results/baselines.sh` here, then carry the paths it prints.
# Session 4, W8A8 decode helper: device call 2 (H100). Usage (repository root): bash THIS_FILE OUTDIR
# 1. before vs call 1's code vs now, one process (ab_e2e.py: e2e decode_bound, 3 runs each, profile);
# 2. the e2e benchmark as issue 5 states it (w8a8 + fp16, decode_bound, 3 runs, profile) with the faster of
#    call 1's code and now (decode_kernels.py is replaced by decode_kernels_call1.py on this machine only if
#    that was faster in step 1; the log says which ran); 3. tests/test_glue_kernels.py on the GPU.
set -o pipefail
out=$1
mkdir -p "$out"
d=bench/results/h100/e2e/session4_w8a8
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$out/gpu.txt"
quiet() { grep -v "Warning\|warn\|^ *$\|USDT\|profiler\|^\s*warnings\|Online softmax\|split the reduction\|important use case\|^softmax"; }
echo "== [$SECONDS s] ab_e2e"
timeout 130 python3 $d/ab_e2e.py "$out/ab_e2e.json" 3 before,now_pdl,call1_pdl 2>&1 | tee "$out/ab_e2e.log" | quiet \
  | grep -v "^ *[-|]\|Name "
pick=$(python3 -c "
import json; v = json.load(open('$out/ab_e2e.json'))['variants']
t = lambda k: v[k]['tpot_ms']['mean'] if k in v and 'tpot_ms' in v[k] else 1e9
print('call1' if t('call1_pdl') < t('now_pdl') else 'now')" 2>/dev/null || echo now)
if [ "$pick" = call1 ]; then cp $d/decode_kernels_call1.py compress/runtime/decode_kernels.py; fi
export COMPRESS_DECODE_PDL=1
cmd="--synthetic llama-3-8b --formats w8a8,fp16 --workloads decode_bound --runs 3 --profile"  # w8a8 first: the number this is for
echo "== [$SECONDS s] kernels: $pick; COMPRESS_DECODE_PDL=1 python3 -m compress.bench.e2e $cmd --output $out/llama-3-8b" \
  | tee "$out/llama-3-8b.log"
timeout $(( 335 - SECONDS )) python3 -m compress.bench.e2e $cmd --output "$out/llama-3-8b" 2>&1 | tee -a "$out/llama-3-8b.log" \
  | quiet | grep -v "^ *[-|]\|Name \|^#\|^\*\*\|^ *- \|^ *$"
rm -f "$out"/llama-3-8b/*.png
t=$(( 350 - SECONDS ))
echo "== [$SECONDS s] pytest glue (timeout $t s)"
[ "$t" -gt 40 ] && timeout $t python3 -m pytest tests/test_glue_kernels.py -q -x 2>&1 | tail -3 | tee -a "$out/ab_e2e.log"
echo "== [$SECONDS s] done ($pick)"
grep -h "TPOT\|bound\|^== " "$out/ab_e2e.log" "$out/llama-3-8b.log" | grep -v "^== \[" | cut -c1-300 | head -30
