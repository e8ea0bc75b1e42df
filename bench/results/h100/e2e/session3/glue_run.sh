#!/usr/bin/env bash
# Session 3, glue-kernel helper: the one H100 call that measured the decode glue changes (results in ./glue/).
# Usage (repository root, on the GPU machine): bash bench/results/h100/e2e/session3/glue_run.sh OUTDIR
# Carried (git-ignored): .whl (llmcompressor for tests/test_runtime_formats.py) and out/e2e_stories (the
# stories260K checkpoints of ../stories260k/make_checkpoints.sh). The GPU machine has no CLI wiring: the
# benchmark runs as `python3 -m compress.bench.e2e` (the function `compress bench e2e` calls).
# Order by value under a ~320 s budget: this session's tests (fast), the Llama-3-8B benchmark, the stories260K
# checkpoints, then the other runtime tests with whatever time is left.
set -o pipefail
out=$1
budget=${BUDGET:-320}
mkdir -p "$out"
left() { echo $(( budget - SECONDS )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || echo "wheel install failed: tests/test_runtime_formats.py will skip"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$out/gpu.txt"
quiet() { grep -v "^|\|^ \|^-\|^#\|^$\|^\`\|Online softmax\|split the reduction\|important use case\|^softmax\|lowering.py\|warnings.warn\|_warn_once"; }

echo "== [$SECONDS s] pytest tests/test_glue_kernels.py"
timeout 60 python3 -m pytest tests/test_glue_kernels.py -q -x 2>&1 | tail -6 | tee "$out/pytest_glue.txt"

cmd="--synthetic llama-3-8b --formats w8a8,fp16,w8a16 --workloads decode_bound,interactive,medium_batch --runs 2 --profile"
echo "== [$SECONDS s] e2e $cmd"
timeout 175 python3 -m compress.bench.e2e $cmd --output "$out/llama-3-8b" 2>&1 | tee "$out/llama-3-8b.log" | quiet

ck=""
for c in fp8_dynamic original vptq_v8_k4096_r256 w4a16_gptq w8a16_awq w8a8_smooth_gptq; do ck="$ck --checkpoint out/e2e_stories/$c"; done
echo "== [$SECONDS s] e2e stories260K"
timeout 60 python3 -m compress.bench.e2e $ck --workloads interactive --runs 2 --output "$out/stories260k" 2>&1 \
  | tee "$out/stories260k.log" | quiet
# The 2:4 W8A8 pack is another helper's format (formats_compress.py): alone, so that an error there cannot stop the rest.
echo "== [$SECONDS s] e2e stories260K w8a8_sparse_smooth_gptq"
timeout 30 python3 -m compress.bench.e2e --checkpoint out/e2e_stories/w8a8_sparse_smooth_gptq --workloads interactive \
  --runs 2 --output "$out/stories260k_sparse" 2>&1 | tee "$out/stories260k_sparse.log" | quiet

t=$(( $(left) - 3 ))
echo "== [$SECONDS s] pytest runtime tests (timeout ${t} s)"
if [ "$t" -gt 20 ]; then
  timeout "$t" python3 -m pytest tests/test_runtime_formats.py tests/test_runtime_fastpath.py -q -x 2>&1 | tail -8 \
    | tee "$out/pytest_runtime.txt"
  echo "rc=$?" >> "$out/pytest_runtime.txt"
fi
echo "== [$SECONDS s] done"
grep -h "TPOT\|bound\|FAILED\|Error" "$out"/*.log | grep -v "^|" | head -60
