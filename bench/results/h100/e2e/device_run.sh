#!/usr/bin/env bash
# How the e2e results in this folder were produced on the lent H100 (see README.md here).
# Usage (repository root, on the GPU machine): bash bench/results/h100/e2e/device_run.sh STAGE OUTDIR
# The GPU machine has no compress CLI wiring or llmcompressor: wheels from .whl/ go to /tmp/site, and
# the command runs as `python3 -m compress.bench.e2e` (the same function `compress bench e2e` calls).
# The device tool returns at most 8 files: every stage leaves one log and one .tgz of its report folders.
set -o pipefail
stage=$1; out=$2
work=/tmp/e2e_$stage
mkdir -p "$out" "$work"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$work/gpu.txt"
e2e() { python3 -m compress.bench.e2e "$@"; }
quiet() { grep -v "^|\|^ \|^-\|^#\|^$\|^\`\|Online softmax\|split the reduction\|important use case\|^softmax\|lowering.py"; }
case "$stage" in
  check)  # runtime tests on the GPU (compiled kernels) + a short benchmark
    timeout 240 python3 -m pytest tests/test_runtime_formats.py tests/test_runtime_fastpath.py -q -x 2>&1 | tail -15 | tee "$work/pytest.txt"
    e2e --synthetic llama-3-8b --formats fp16,w4a16,w8a8 --workloads interactive,decode_bound --runs 2 \
        --output "$work/check" 2>&1 | tee "$work/check.log" | quiet ;;
  llama8b)
    e2e --synthetic llama-3-8b --formats "${FORMATS:-fp16,w4a16,w8a8,fp8,sparse24,w8a8-sparse24,vptq}" \
        --workloads "${WORKLOADS:-all}" --runs 3 ${PROFILE:+--profile} --output "$work/llama-3-8b" 2>&1 \
        | tee "$work/llama-3-8b.log" | quiet ;;
  others)
    for arch in qwen3-8b llama-3-70b-layers; do
      e2e --synthetic $arch --formats fp16,w4a16,w8a8 --workloads "${WORKLOADS:-interactive,decode_bound}" \
          --runs 3 --output "$work/$arch" 2>&1 | tee "$work/$arch.log" | quiet
    done ;;
  session2)  # session 2's one call: bench/results/h100/e2e/session2_run.py (stages by priority, time budget)
    # $CKPTS: real checkpoints written here by `compress run` (git-ignored, carried), e.g. out/e2e_stories
    # The driver snapshots its folder into $out every 20 s: a run stopped at the device's limit still returns.
    timeout "${HARD:-515}" python3 bench/results/h100/e2e/session2_run.py "$work/session2" "${BUDGET:-480}" "${CKPTS:-}" \
      "$out/e2e_session2.tgz" 2>&1 | tee "$out/session2.log" | quiet
    cp "$work/gpu.txt" "$out/gpu.txt"; exit 0 ;;
esac
tar -czf "$out/e2e_$stage.tgz" -C "$work" .
