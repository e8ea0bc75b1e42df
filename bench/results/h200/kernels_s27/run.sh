#!/bin/bash
# Session 27 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache sweep" SWEEP_M=1 SWEEP_CLUSTER=0 SWEEP_TAG=_m1 bash bench/results/h200/kernels_s27/run.sh
# Stages:
# kcache: unpack the W4A16 libraries built on the CPU machine (nvcc 13.0, sm_90a; `carry` .kcache, which holds
#   w4a16.tar.xz) into the call's kernel cache, and drop any that does not load;
# build: every W4A16 build (w4a16_cuda.VARIANTS) in parallel nvcc processes, timed;
# sweep: bench/results/h100/kernels_s25/sweep.py over every build (SWEEP_VARIANTS, default all) at SWEEP_M, cluster
#   arms SWEEP_CLUSTER, to $OUT/sweep${SWEEP_TAG}.json and picks${SWEEP_TAG}.json; merge: picks_*.json into picks.json;
# ncu: Nsight Compute on ncu_probe.py (NCU_SHAPES);
# ab: the 8B W4A16 decode step, one process, arms ARMS (bench/results/h100/e2e/session9/ab_decode.py);
# tiled: tiled_ab.py at TILED_M; tests: the GPU tests (TESTS, -k TEST_K);
# table: `compress bench kernels` (TABLE_ARGS); e2e: `compress bench e2e` on synthetic E2E_ARCH weights
#   (E2E_FORMATS, E2E_WORKLOADS). Both with COMPRESS_W4A16_PICKS=$PICKS when PICKS names a file.
. "$(dirname "$0")/../../h100/device_env.sh"
[ -n "$PICKS" ] && [ -f "$PICKS" ] && export COMPRESS_W4A16_PICKS="$PICKS" && echo "picks: $PICKS"
for stage in $STAGES; do
  case $stage in
    kcache) python3 -c "
import ctypes, glob, os, tarfile
cache = os.environ['COMPRESS_KERNEL_CACHE']
os.makedirs(cache, exist_ok=True)
tarfile.open('.kcache/w4a16.tar.xz').extractall(cache)
bad = []
for f in glob.glob(cache + '/*.so'):
    try:
        ctypes.CDLL(f)
    except OSError as e:
        bad.append((os.path.basename(f), str(e)[:120])); os.remove(f)
print(f'kernel cache: {len(glob.glob(cache + \"/*.so\"))} carried libraries load, {len(bad)} removed {bad[:2]}')" ;;
    build) timeout "${BUILD_LIMIT:-240}" python3 -c "
import time, torch
from kernels import w4a16_cuda as w
t = time.time()
w.prebuild(torch.device('cuda'), sorted(w.VARIANTS))
print(f'{len(w.VARIANTS)} W4A16 builds ready in {time.time() - t:.0f} s')" 2>&1 | tail -3 | tee "$OUT/build.log" ;;
    sweep) SWEEP_VARIANTS="${SWEEP_VARIANTS:-all}" timeout "${SWEEP_LIMIT:-300}" python3 bench/results/h100/kernels_s25/sweep.py \
             "$OUT/sweep${SWEEP_TAG}.json" "$OUT/picks${SWEEP_TAG}.json" ${SWEEP_M:-1} 2>&1 | tee "$OUT/sweep${SWEEP_TAG}.log" \
             | grep -v "^    NOT" | cut -c1-230 ;;
    merge) python3 -c "
import glob, json
out = {}
for f in sorted(glob.glob('$OUT/picks_*.json')):
    for nk, by in json.load(open(f)).items():
        out.setdefault(nk, {}).update(by)
json.dump(out, open('$OUT/picks.json', 'w'), indent=1)
print(f'merged picks: {sum(len(v) for v in out.values())} (shape, bucket) entries')" ;;
    ncu) timeout "${NCU_LIMIT:-150}" ncu --clock-control none -k regex:"w4a16|gemv|gemm" --launch-count "${NCU_COUNT:-14}" \
           --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
           --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
           python3 "$(dirname "$0")/ncu_probe.py" ${NCU_SHAPES} > "$OUT/ncu.txt" 2>&1; echo "ncu rc $?"
         grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per|call [0-9]" "$OUT/ncu.txt" | head -90 ;;
    ab) timeout "${AB_LIMIT:-240}" python3 bench/results/h100/e2e/session9/ab_decode.py "$OUT" "$ARMS" 2>&1 | tee "$OUT/ab.log" \
          | grep --line-buffered -E "^ARM|bound|Error|error" | cut -c1-200
        for f in "$OUT"/trace_*.json.gz; do [ -f "$f" ] && python3 bench/results/h100/e2e/session9/increments.py "$f" \
          > "${f%.json.gz}_increments.txt" 2>&1; done
        rm -f "$OUT"/trace_*.json.gz ;;
    tiled) timeout "${TILED_LIMIT:-300}" python3 "$(dirname "$0")/tiled_ab.py" "$OUT/tiled${TILED_TAG}.json" ${TILED_M:-1 16} 2>&1 \
             | tee "$OUT/tiled${TILED_TAG}.log" | cut -c1-260 ;;
    tests) timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_w4a16_shared_tile.py} \
             ${TEST_K:+-k "$TEST_K"} 2>&1 | tail -25 | tee "$OUT/pytest${TEST_TAG}.log" ;;
    table) timeout "${TABLE_LIMIT:-300}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16} --output "$OUT/kernels${TABLE_TAG}" 2>&1 \
             | tail -40 > "$OUT/table${TABLE_TAG}.log"; tail -14 "$OUT/table${TABLE_TAG}.log" ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" \
           --formats "${E2E_FORMATS:-w4a16}" --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 \
           --output "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" 2>&1 \
           | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
           | tee "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|wrote" | cut -c1-260 ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
