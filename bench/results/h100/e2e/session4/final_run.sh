#!/usr/bin/env bash
# Session 4, lead: the one end-to-end call after the W4A16 CUDA GEMV (M <= 16, cp.async rings, PDL) and the W8A8
# decode changes (PDL GEMVs). Usage (repository root, GPU machine): bash bench/results/h100/e2e/session4/final_run.sh OUT
# The GPU machine has no console script: `python3 -m compress.bench.e2e` is what `compress bench e2e` calls.
# Order by value under the call's limit: Llama-3-8B (fp16 bound, W4A16, W8A8), Qwen3-8B W4A16, then GPU runtime tests.
set -o pipefail
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$out/gpu.txt"
git rev-parse HEAD > "$out/commit.txt" 2>/dev/null
quiet() { grep -v "^|\|^ \|^-\|^#\|^$\|^\`\|Online softmax\|split the reduction\|important use case\|^softmax\|lowering.py\|warnings.warn\|_warn_once"; }
echo "== [$SECONDS s] llama-3-8b"
timeout ${T1:-200} python3 -m compress.bench.e2e --synthetic llama-3-8b --formats fp16,w4a16,w8a8 --workloads decode_bound \
  --runs 3 --profile --output "$out/llama-3-8b" 2>&1 | tee "$out/llama-3-8b.log" | quiet
echo "== [$SECONDS s] qwen3-8b"
timeout ${T2:-110} python3 -m compress.bench.e2e --synthetic qwen3-8b --formats w4a16 --workloads decode_bound --runs 3 \
  --output "$out/qwen3-8b" 2>&1 | tee "$out/qwen3-8b.log" | quiet
t=$(( ${BUDGET:-370} - SECONDS - 5 ))
echo "== [$SECONDS s] runtime GPU tests (timeout ${t} s)"
if [ "$t" -gt 20 ]; then
  timeout "$t" python3 -m pytest tests/test_runtime_fastpath.py tests/test_runtime_formats.py -q -x -p no:cacheprovider 2>&1 \
    | tail -8 | tee "$out/pytest_runtime.txt"
fi
echo "== [$SECONDS s] done"
grep -h "TPOT\|bound\|FAILED\|Error" "$out"/*.log | grep -v "^|" | head -40
