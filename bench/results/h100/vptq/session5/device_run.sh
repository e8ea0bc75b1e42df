#!/bin/bash
# Session-5 VPTQ device run (issue 4): one script per call, run from the repository root on the lent GPU machine.
#   bash bench/results/h100/vptq/session5/device_run.sh '<arm>' ['<arm>' ...]
# carry: .blob_a .blob_b (the two SmolLM2 GGUF halves, /work/notes/GPU_SMOLLM2.md), .whl, .data.
# A call that finds neither the joined GGUF nor half a only stores half a and exits (the first, tiny call).
set -u
G=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
if ! test -f $G; then
  if test -f /tmp/smol/a && test -f .blob_b/part; then cat /tmp/smol/a .blob_b/part > $G
  elif test -f .blob_a/part; then mkdir -p /tmp/smol && cp .blob_a/part /tmp/smol/a && echo "HALF_A_STORED" && exit 0
  else echo "NO_GGUF: carry .blob_a or .blob_b"; exit 3; fi
fi
sha256sum $G | cut -c1-16
test -d /tmp/site || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
ARGS=()
for a in "$@"; do ARGS+=(--arm "$a"); done
timeout ${LIMIT:-455} python bench/results/cpu/vptq_fit/diag_blocks.py --model $G --device cuda --data .data --calib 128x512 \
  --full-kmeans --windows 0 --blocks 30 --cache none --out $OUT/diag.json "${ARGS[@]}" > $OUT/log.txt 2>&1
echo "rc $?"
grep -a -v "^20\|it/s\|Warn\|warn" $OUT/log.txt | tail -40
