#!/bin/bash
# Session 9 device calls (repository root, kind nvidia-h100-x1), OUT=$OUT: the W4A16 decode step's L2 prefetch (call 1:
# of the next layer; call 2 on: each GEMV's own chunk heads, before its dependency wait) and the Triton silu * up under PDL.
#   STAGES="build tests ab e2e": parallel nvcc build of the variants the 8B step and the tests use, the GPU tests of
#   the changed kernels and runtime, the same-process A/B (ab_decode.py, ARMS; AB_KEEP seconds are left for the
#   stages after it), then the e2e bench command of issue 5 (E2E_ENV: settings for it, e.g. "PF=16 SILU=triton").
# Every limit counts from the script's start (LIMIT, seconds); a stage with too little time left is skipped.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
git log -1 --format=%H 2>/dev/null | tee -a "$LOG"
for s in ${STAGES:-build tests ab}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    build)
      timeout 150 python3 -c "
import time, torch
from kernels import w4a16_cuda
from concurrent.futures import ThreadPoolExecutor
from kernels import cuda_build
names = [(n, False) for n in ('w8b2s3', 'w16b2s2', 'w8b2s4', 'w16b2s3')] + [(n, True) for n in ('w8b2s3', 'w16b2s2', 'w16b2s3', 'w8b2s4')]
code = cuda_build.arch(torch.device('cuda'))
t = time.time()
with ThreadPoolExecutor(len(names)) as pool:
    list(pool.map(lambda a: w4a16_cuda.compile_variant(code, *a), names))
print(f'built {names} in {time.time() - t:.1f} s')" 2>&1 | tee -a "$LOG" | tail -3 ;;
    tests)
      timeout ${TEST_S:-150} python3 -m pytest ${TEST_FILES:-tests/test_s9_decode_silu.py tests/test_w4a16_cuda.py} \
        -q --maxfail=5 -p no:cacheprovider -k "${TEST_K:-s9 or back_to_back or same_inputs}" \
        2>&1 | tee "$OUT/tests.log" | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" | cut -c1-300 | tail -15 ;;
    ab)
      [ "$(left ${AB_KEEP:-10})" -lt ${AB_MIN:-90} ] && { echo "skip ab: $(left) s left" | tee -a "$LOG"; continue; }
      timeout $(left ${AB_KEEP:-10}) python3 bench/results/h100/e2e/session9/ab_decode.py "$OUT" "${ARMS:-PF=0,SILU=compiled;PF=16,SILU=triton}" 2>&1 \
        | tee "$OUT/ab.log" | grep --line-buffered -E "^ARM|^PATH|bound|Error|error|done" | cut -c1-400 ;;
    e2e)
      [ "$(left 5)" -lt ${E2E_MIN:-170} ] && { echo "skip e2e: $(left) s left" | tee -a "$LOG"; continue; }
      ( for kv in $E2E_ENV; do case ${kv%%=*} in PF) export COMPRESS_W4A16_L2_PREFETCH_MB=${kv#*=};; SILU) export COMPRESS_DECODE_SILU=${kv#*=};; *) export "$kv";; esac; done
        timeout $(left 5) python3 -m compress.bench.e2e --synthetic llama-3-8b --formats fp16,w4a16,w8a8 \
        --workloads decode_bound --runs 3 --output "$OUT/e2e" ) 2>&1 | tee "$OUT/e2e.log" \
        | grep --line-buffered -E "TPOT|bound|Error" | cut -c1-300
      rm -f "$OUT"/e2e/*.png ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
[ -f "$OUT/ab.log" ] && sed -n '/Name/,$p' "$OUT/ab.log" | cut -c1-200 | head -24
[ -f "$OUT/e2e/e2e.md" ] && grep -E "TPOT / bound|_w4a16 .*\||_fp16 .*\||_w8a8 .*\|" "$OUT/e2e/e2e.md" | tail -8
# The call returns a few files: everything goes into one archive, the logs also stay beside it.
cd "$OUT" && tar czf /tmp/results.tgz . && rm -rf trace_*.json.gz e2e picks && mv /tmp/results.tgz . ; ls -la "$OUT" | tail -8
