#!/bin/bash
# Session-6 VPTQ device run (issue 4): run from the repository root on the lent GPU machine.
#   LIMIT=<seconds from the script's start> bash bench/results/h100/vptq/session6/device_run.sh '<arm>' ['<arm>' ...]
# carry: .blob_a (first, tiny call: only stores half a) / .blob_b .whl .data (the real call), /work/notes/GPU_SMOLLM2.md.
# Arms as in bench/results/cpu/vptq_fit/diag_blocks.py (gptq3, vptq:<preset>[:field=value,...]), run one after the
# other in ONE process (never side by side); $OUT/diag.json is rewritten after every arm, the log is line-buffered.
set -u
START=$(date +%s)
G=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
if ! test -f $G; then
  if test -f /tmp/smol/a && test -f .blob_b/part; then cat /tmp/smol/a .blob_b/part > $G
  elif test -f .blob_a/part; then mkdir -p /tmp/smol && cp .blob_a/part /tmp/smol/a && echo "HALF_A_STORED" && exit 0
  else echo "NO_GGUF: carry .blob_a or .blob_b"; exit 3; fi
fi
sha256sum $G | cut -c1-16
test -d /tmp/site/llmcompressor || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
ARGS=()
for a in "$@"; do ARGS+=(--arm "$a"); done
# FINETUNE='steps=224,norms=1;steps=112': refinements from each arm's fit (diag_blocks.py --finetune), ';'-separated
IFS=';' read -ra FTS <<< "${FINETUNE:-}"
for f in "${FTS[@]}"; do ARGS+=(--finetune "$f"); done
LEFT=$(( ${LIMIT:-500} - ($(date +%s) - START) ))
echo "python limit ${LEFT} s"
timeout $LEFT python bench/results/cpu/vptq_fit/diag_blocks.py --model $G --device cuda --data .data --calib 128x512 \
  --full-kmeans --windows 0 --blocks 30 --cache none --out $OUT/diag.json "${ARGS[@]}" 2>&1 \
  | grep -a --line-buffered -v "it/s\]\|Warn\|warn\|^20[0-9][0-9]-" > $OUT/log.txt
echo "rc ${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"
tail -30 $OUT/log.txt
# Optional single-layer fit timing (issue 4 asks for one 4096x14336 layer), in the time left:
#   LAYER_ROW=layer:vptq_v8_k4096_r128:4096x14336 LIMIT=505 bash .../device_run.sh <arms>
if [ -n "${LAYER_ROW:-}" ]; then
  LEFT=$(( ${LIMIT:-500} - ($(date +%s) - START) ))
  echo "layer row limit ${LEFT} s"
  # `timeout 0` would mean no limit at all (it did in call 4): skip the row instead when no time is left
  [ "$LEFT" -gt 0 ] && timeout $LEFT python bench/vptq_table.py --out /tmp/vt6 --device cuda --no-eval --verbose --rows "$LAYER_ROW" > $OUT/layer_log.txt 2>&1
  echo "layer rc $?"; cp /tmp/vt6/vptq_table.json $OUT/layer_row.json 2>/dev/null; tail -5 $OUT/layer_log.txt
fi
