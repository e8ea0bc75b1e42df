#!/usr/bin/env bash
# Session 9: the W4A16 kernel table (issue 3) after TUNED's bucket-8 change for the 8B down and fused qkv (chosen in
# the decode step). Usage (repository root, GPU machine): OUT=DIR bash bench/results/h100/e2e/session9/w4a16_table.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMPRESS_KERNEL_CACHE=/tmp/kc
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
timeout 150 python3 -c "
import torch
from kernels import w4a16_cuda
w4a16_cuda.prebuild(torch.device('cuda'), sorted(w4a16_cuda.VARIANTS))" 2>&1 | tail -2
echo "[$SECONDS s] table"
timeout ${T:-420} python3 -m compress.bench.kernels --suite w4a16 --quick --output "$OUT/w4a16" > "$OUT/w4a16.log" 2>&1
echo "rc=$? [$SECONDS s]"; grep -hE "median|rows with|->|geomean|speedup" "$OUT/w4a16/kernels.md" | head -20 | cut -c1-250
cd "$OUT" && tar czf /tmp/results.tgz . && mv /tmp/results.tgz .
