#!/bin/bash
# Session 25 device calls (repository root, kind nvidia-h100-x1; $OUT from the device tool):
#   STAGES="build tests sweep ab" bash bench/results/h100/kernels_s25/run.sh
# build: the W4A16 GEMV's shared-tile builds and the builds the runtime serves, in parallel nvcc processes;
# tests: the GPU tests (TESTS, -k TEST_K); sweep: sweep.py at SWEEP_M (writes $OUT/picks.json); ab: the 8B W4A16
# decode step, same process, arms ARMS (default: the served configs against the sweep's picks, twice each), with
# bench/results/h100/e2e/session9/ab_decode.py; table: `compress bench kernels` (TABLE_ARGS).
. "$(dirname "$0")/../device_env.sh"
for stage in $STAGES; do
  case $stage in
    build) timeout "${BUILD_LIMIT:-240}" python3 -c "
import time, torch
from kernels import w4a16_cuda as w
from kernels.cases import LLAMA_SHAPES
names = set(w.SHARED_TILE) | {w.default_config(m, n, k)[0] for m in (1, 16) for _, n, k in LLAMA_SHAPES + [('', 6144, 4096), ('', 28672, 4096)]}
t = time.time()
w.prebuild(torch.device('cuda'), sorted(names))
print(f'built {sorted(names)} in {time.time() - t:.0f} s')" 2>&1 | tail -3 | tee "$OUT/build.log" ;;
    tests) timeout "${TEST_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_w4a16_shared_tile.py} \
             ${TEST_K:+-k "$TEST_K"} 2>&1 | tail -25 | tee "$OUT/pytest.log" ;;
    sweep) timeout "${SWEEP_LIMIT:-300}" python3 bench/results/h100/kernels_s25/sweep.py "$OUT/sweep.json" "$OUT/picks.json" \
             ${SWEEP_M:-1 16} 2>&1 | tee "$OUT/sweep.log" | grep -v "^    NOT" ;;
    ab) [ -f "$OUT/picks.json" ] || echo '{}' > "$OUT/picks.json"
        P="COMPRESS_W4A16_PICKS=$OUT/picks.json"
        timeout "${AB_LIMIT:-240}" python3 bench/results/h100/e2e/session9/ab_decode.py "$OUT" \
          "${ARMS:-FUSE=0;$P;FUSE=0;$P}" 2>&1 | tee "$OUT/ab.log" | grep --line-buffered -E "^ARM|bound|Error|error" | cut -c1-300
        for f in "$OUT"/trace_*.json.gz; do [ -f "$f" ] && python3 bench/results/h100/e2e/session9/increments.py "$f" \
          > "${f%.json.gz}_increments.txt" 2>&1; done
        rm -f "$OUT"/trace_*.json.gz ;;
    table) timeout "${TABLE_LIMIT:-400}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16} --output "$OUT/kernels" 2>&1 \
             | tail -40 > "$OUT/table.log"; tail -12 "$OUT/table.log" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
