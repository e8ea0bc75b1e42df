#!/bin/bash
# Session 8 device call for the W4A16 CUDA GEMV at M = 16..64 (repository root, kind nvidia-h100-x1), OUT=$OUT:
#   build  every variant of the new source (or those in BUILD) in parallel, and w8b2s3 / w16b2s2 of the
#          session-start source (OLD_REV)
#   tests  the session-8 GPU tests, then the GPU tests of tests/test_w4a16_cuda.py that cover the kernel's math
#   tests2 (call 2) GPU tests on the built variants only: wide M, refusals, cluster = workspace bytes, graphs
#   ab     ab.py: fp16 / Triton / CUDA (current, old source, candidates) at M = 1, 16, 32, 64 -> picks.json, table
#   table  (if >= 80 s are left) `compress.bench.kernels --suite w4a16 --quick` with COMPRESS_W4A16_PICKS=picks.json
#   s7     (if >= 50 s are left) tests/test_s7_decode_fused.py (the fused decode GEMVs on the changed main loop)
# Call 1: LIMIT=270 bash run.sh; call 2: STAGES="build tests2 ab" BUILD="..." (see README.md).
# Every limit counts from the script's start (LIMIT, seconds), so a later stage gets what is left.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-280}
OLD_REV=${OLD_REV:-1dc33ac}
DIR=bench/results/h100/kernels_s8_w4a16
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
echo "commit $(git rev-parse --short HEAD 2>/dev/null) dirty=$(git status --porcelain kernels tests 2>/dev/null | wc -l)" | tee -a "$LOG"
OLD=/tmp/w4a16_gemv_old.cu
git show "$OLD_REV:kernels/csrc/w4a16_gemv.cu" > $OLD 2>/dev/null || { echo "no git history: old-source timing skipped" | tee -a "$LOG"; rm -f $OLD; }
for s in ${STAGES:-build tests ab table s7}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    build)
      timeout ${BUILD_S:-110} python3 -c "
import time, torch
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from kernels import cuda_build, w4a16_cuda
t = time.time(); arch = cuda_build.arch(torch.device('cuda'))
names = '${BUILD:-}'.split() or sorted(w4a16_cuda.VARIANTS)
jobs = [(w4a16_cuda.SRC, nm) for nm in names]
if Path('$OLD').is_file():
    jobs += [(Path('$OLD'), nm) for nm in ('w8b2s3', 'w16b2s2')]
def one(job):
    src, nm = job
    w, b, s = w4a16_cuda.VARIANTS[nm]
    flags = [f'-DW4_WARPS={w}', f'-DW4_SB={b}', f'-DW4_STAGES={s}'] + ([f'-DW4_RT={w4a16_cuda.ROW_TILES[nm]}'] if nm in w4a16_cuda.ROW_TILES else [])
    return cuda_build.compile_library(src, nm, flags, arch, 'w4a16', 'none')
with ThreadPoolExecutor(len(jobs)) as pool:
    list(pool.map(one, jobs))
print(f'built {len(jobs)} libraries in {time.time() - t:.1f} s')" 2>&1 | tee -a "$LOG" | tail -3 ;;
    tests2)  # call 2: the session-6 GPU tests on the new source (two-row-tile builds among the variants)
      timeout ${TEST_S:-30} python3 -m pytest tests/test_w4a16_cuda.py tests/test_s8_w4a16_wide.py -q -p no:cacheprovider \
        -k "not compiles and not every and (wide_m or cluster_reduction or split_plans)" \
        2>&1 | tee -a "$LOG" | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" | cut -c1-300 | tail -15 ;;
    tests)
      timeout ${TEST_S:-75} python3 -m pytest tests/test_s8_w4a16_wide.py tests/test_w4a16_cuda.py -q -x -p no:cacheprovider \
        -k "not compiles and (wide or every or same or cluster or back_to_back or gemv_matches or balanced_schedule or leading)" \
        2>&1 | tee -a "$LOG" | grep --line-buffered -E "passed|failed|Error|^FAILED|assert" | cut -c1-300 | tail -15 ;;
    ab)
      AB_LIMIT_S=$(left ${AB_TAIL:-30}) timeout $(left 5) python3 $DIR/ab.py "$OUT" $OLD 2>&1 | tee "$OUT/ab.log" \
        | grep --line-buffered -vE "^\|" | cut -c1-600 ;;
    table)
      [ $(left) -lt 80 ] && { echo "skipped: $(left) s left"; continue; }
      env $([ -s "$OUT/picks.json" ] && echo "COMPRESS_W4A16_PICKS=$OUT/picks.json") timeout $(left 45) \
        python3 -m compress.bench.kernels --suite w4a16 --quick --output "$OUT/kernels" 2>&1 \
        | tee "$OUT/table.log" | grep --line-buffered -E "median|Error|error|W4A16" | cut -c1-300 | tail -8
      rm -f "$OUT"/kernels/*.png ;;
    s7)
      [ $(left) -lt 45 ] && { echo "skipped: $(left) s left"; continue; }
      timeout $(left 5) python3 -m pytest tests/test_s7_decode_fused.py -q -x -p no:cacheprovider 2>&1 | tee -a "$LOG" \
        | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -6 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
[ -f "$OUT/ab.log" ] && grep -E "^\||^M=" "$OUT/ab.log"
