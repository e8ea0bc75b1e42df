#!/usr/bin/env bash
# How bench/recipes_vs_oneshot.py ran on the lent GPU machine (no model hub there; see README "Measured
# results"). Needs: llmcompressor + compressed-tensors wheels in .whl/, the SmolLM2-135M-Instruct GGUF at
# /tmp/smol/ (it travels in two halves, .blob_a/.blob_b, because one transfer holds 64 MiB), the offline
# corpora in .data/. Usage: bash bench/results/h100/recipes/device_run.sh OUT_DIR [args for the bench...]
# SCRIPT=bench/calibration_layouts.py runs that bench instead (same --model/--out arguments).
set -euo pipefail
out=$1; shift
source bench/results/h100/recipes/smollm2_setup.sh
sha256sum $gguf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 "${SCRIPT:-bench/recipes_vs_oneshot.py}" --model /tmp/smol-hf --out "$out" "$@" 2>&1 | grep -v "it/s\]" 
