#!/bin/bash
# Session 28 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache probe" bash bench/results/h200/kernels_s28/run.sh
# Stages:
# kcache: bench/kernel_cache.py unpack .kcache/kernels.tar.xz (built on the CPU machine; `carry` .kcache), timed;
# probe: build and run read_probe.cu (how fast a launch reads a weight-sized buffer, by the way it reads; PROBE_SHAPES
#   picks shapes by index, default all five; PROBE_ARMS arms by index, default all), to $OUT/probe.log;
# diag: diag.py (w16b2s2 / w16b2s3 with parts of the kernel left out, at the commit that has the DIAG builds);
# pdl: pdl_ab.py (the served W4A16 GEMV at one token with plain launches, PDL, PDL with early weight reads);
# ncu: Nsight Compute on kernels_s27/ncu_probe.py (NCU_SHAPES) with the warp stall reasons;
# sweep: bench/results/h100/kernels_s25/sweep.py over SWEEP_VARIANTS at SWEEP_M (SWEEP_WAVES, SWEEP_CLUSTER), to
#   $OUT/sweep${SWEEP_TAG}.json and picks${SWEEP_TAG}.json;
# nomath: nomath.py (the served W4A16 GEMV at one token against its build without the main loop's math);
# table: `compress bench kernels` (TABLE_ARGS); tests: the GPU tests (TESTS, -k TEST_K); e2e: `compress bench e2e` on
#   synthetic E2E_ARCH weights (E2E_FORMATS, E2E_WORKLOADS); pack: the result folders as .tgz (few files come back).
. "$(dirname "$0")/../../h100/device_env.sh"
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    kcache) ( time python3 bench/kernel_cache.py unpack .kcache/kernels.tar.xz ) 2>&1 | tee "$OUT/kcache.log" ;;
    probe) nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/read_probe "$here/read_probe.cu" || continue
           /tmp/read_probe 0 -3 | head -1 | tee "$OUT/probe.log"
           n=$(/tmp/read_probe 0 -2 | grep arms | cut -d' ' -f1)
           for sh in ${PROBE_SHAPES:-0 1 2 3 4}; do for a in ${PROBE_ARMS:-$(seq 0 $((n - 1)))}; do  # one process an arm
             timeout 30 /tmp/read_probe "$sh" "$a" 2>&1 | tee -a "$OUT/probe.log"; done; done ;;
    ncu) timeout "${NCU_LIMIT:-150}" ncu --clock-control none -k regex:"w4a16|gemv|gemm" --launch-count "${NCU_COUNT:-14}" \
           --section SpeedOfLight --section WarpStateStats --section Occupancy \
           --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
           python3 "$here/../kernels_s27/ncu_probe.py" ${NCU_SHAPES} > "$OUT/ncu.txt" 2>&1; echo "ncu rc $?"
         grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|issue_stalled.*[0-9]\.[0-9]*$" "$OUT/ncu.txt" \
           | awk '$NF+0 > 0.3 || !/issue_stalled/' | head -80 ;;
    sweep) SWEEP_VARIANTS="${SWEEP_VARIANTS:-all}" timeout "${SWEEP_LIMIT:-300}" python3 bench/results/h100/kernels_s25/sweep.py \
             "$OUT/sweep${SWEEP_TAG}.json" "$OUT/picks${SWEEP_TAG}.json" ${SWEEP_M:-1} 2>&1 | tee "$OUT/sweep${SWEEP_TAG}.log" \
             | grep -v "^    NOT" | cut -c1-230 ;;
    diag) timeout "${DIAG_LIMIT:-200}" python3 "$here/diag.py" $DIAG_ARGS 2>&1 | tee "$OUT/diag.log" ;;
    pdl) timeout "${PDL_LIMIT:-120}" python3 "$here/pdl_ab.py" 2>&1 | tee "$OUT/pdl_ab.log" ;;
    nomath) timeout "${NOMATH_LIMIT:-120}" python3 "$here/nomath.py" 2>&1 | tee "$OUT/nomath.log" ;;
    tests) timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider ${TESTS} ${TEST_K:+-k "$TEST_K"} 2>&1 \
             | tail -25 | tee "$OUT/pytest${TEST_TAG}.log" ;;
    table) timeout "${TABLE_LIMIT:-300}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16} --output "$OUT/kernels${TABLE_TAG}" 2>&1 \
             | tail -40 > "$OUT/table${TABLE_TAG}.log"; tail -14 "$OUT/table${TABLE_TAG}.log" ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" \
           --formats "${E2E_FORMATS:-w4a16}" --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 \
           --output "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" 2>&1 \
           | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
           | tee "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|wrote" | cut -c1-260 ;;
    pack) cd "$OUT" && for d in kernels* e2e_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done; cd - > /dev/null ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
