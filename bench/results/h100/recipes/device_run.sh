#!/usr/bin/env bash
# How bench/recipes_vs_oneshot.py ran on the lent GPU machine (no model hub there; see README "Measured
# results"). Needs: llmcompressor + compressed-tensors wheels in .whl/, the SmolLM2-135M-Instruct GGUF at
# /tmp/smol/ (it travels in two halves, .blob_a/.blob_b, because one transfer holds 64 MiB), the offline
# corpora in .data/. Usage: bash bench/results/h100/recipes/device_run.sh OUT_DIR [args for the bench...]
# SCRIPT=bench/calibration_layouts.py runs that bench instead (same --model/--out arguments).
set -euo pipefail
out=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD COMPRESS_DATA_DIR=$PWD/.data HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
gguf=/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf
test -f $gguf || cat /tmp/smol/a .blob_b/part > $gguf
sha256sum $gguf
# The GGUF is dequantized once into a bf16 HF folder: both arms then load the same weights fast.
test -f /tmp/smol-hf/model.safetensors || python3 - <<'PY'
import torch
from compress.model_source import load_model, load_tokenizer, resolve_model
src = resolve_model("/tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf")
m, t = load_model(src, "cpu"), load_tokenizer(src)
m.to(torch.bfloat16).save_pretrained("/tmp/smol-hf"); t.save_pretrained("/tmp/smol-hf")
PY
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 "${SCRIPT:-bench/recipes_vs_oneshot.py}" --model /tmp/smol-hf --out "$out" "$@" 2>&1 | grep -v "it/s\]" 
