#!/usr/bin/env bash
# Session 9, lead: the closing e2e call on the committed defaults (Triton silu * up under PDL, the decode-step GEMV
# configs of TUNED, the path table's 1 ms spin). Usage (repository root, GPU machine): OUT=DIR bash bench/results/h100/e2e/session9/final_run.sh
# The GPU machine has no console script: `python3 -m compress.bench.e2e` is what `compress bench e2e` calls.
# Order by value under the call's limit: Llama-3-8B (fp16, W4A16, W8A8 + profile), Qwen3-8B W4A16, then GPU tests.
set -o pipefail
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt"
quiet() { grep --line-buffered -E "TPOT|bound|Error|error|FAILED"; }
echo "== [$SECONDS s] build"  # the variants the two models use at M = 1, in parallel (lazily they would build one by one)
timeout 150 python3 -c "
import torch
from kernels import w4a16_cuda
w4a16_cuda.prebuild(torch.device('cuda'), ['w8b2s3', 'w16b2s2', 'w16b2s3', 'w8b2s4', 'w4b4s3'])" 2>&1 | tail -2
echo "== [$SECONDS s] llama-3-8b"
timeout ${T1:-260} python3 -m compress.bench.e2e --synthetic llama-3-8b --formats fp16,w4a16,w8a8 --workloads decode_bound \
  --runs 3 --profile --output "$OUT/llama-3-8b" 2>&1 | tee "$OUT/llama-3-8b.log" | quiet | cut -c1-250
echo "== [$SECONDS s] qwen3-8b"
timeout ${T2:-110} python3 -m compress.bench.e2e --synthetic qwen3-8b --formats w4a16 --workloads decode_bound --runs 3 \
  --output "$OUT/qwen3-8b" 2>&1 | tee "$OUT/qwen3-8b.log" | quiet | cut -c1-250
t=$(( ${BUDGET:-560} - SECONDS - 15 ))
echo "== [$SECONDS s] GPU tests (timeout ${t} s)"
if [ "$t" -gt 20 ]; then
  timeout "$t" python3 -m pytest tests/test_s9_decode_silu.py tests/test_runtime_fastpath.py tests/test_w4a16_cuda.py -q \
    -p no:cacheprovider -k "s9 or fastpath or back_to_back or same_inputs or default_config or gemv_matches_reference" 2>&1 \
    | tail -6 | tee "$OUT/pytest_gpu.txt"
fi
echo "== [$SECONDS s] done"
for f in "$OUT"/*/e2e.md; do grep -E "TPOT / bound|\| decode_bound" "$f" | head -8; done
cd "$OUT" && tar czf /tmp/results.tgz . && mv /tmp/results.tgz . && ls
