#!/bin/bash
# Session 29 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache cc table" bash bench/results/h200/kernels_s29/run.sh
# Stages:
# kcache: bench/kernel_cache.py unpack .kcache/kernels.tar.xz (built on the CPU machine; `carry` .kcache), timed;
# cc: build and run cc_gemv_probe.cu (a CUDA-core W4A16 one-token GEMV fed by plain loads, checked against an fp32
#   reference, timed by the rotate method); CC_SHAPES picks shapes by index (default all six), CC_ARMS arms by index
#   (default all); one process an arm, to $OUT/cc.log;
# ab: cc_ab.py (the CUDA-core GEMV, kernels/w4a16_cc.py, against the served tensor-core GEMV and fp16 per layer shape at
#   one token), to $OUT/cc_ab.json and cc_ab.log;
# table: `compress bench kernels` (TABLE_ARGS, default the quick W4A16 table: the served GEMV on the same machine);
# tests: the GPU tests (TESTS, -k TEST_K); e2e: `compress bench e2e` on synthetic E2E_ARCH weights (E2E_FORMATS,
#   E2E_WORKLOADS); pack: the result folders as .tgz (few files come back).
. "$(dirname "$0")/../../h100/device_env.sh"
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    kcache) ( time python3 bench/kernel_cache.py unpack .kcache/kernels.tar.xz ) 2>&1 | tee "$OUT/kcache.log" ;;
    cc) nvcc -O3 -std=c++17 -arch=sm_90a -Xptxas -v -o /tmp/cc "$here/cc_gemv_probe.cu" > "$OUT/cc_build.log" 2>&1 \
          || { tail -20 "$OUT/cc_build.log"; continue; }
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/cc.log"
        n=$(/tmp/cc 0 -2 | grep arms | cut -d' ' -f1)
        for sh in ${CC_SHAPES:-0 1 2 3 4 5}; do for a in ${CC_ARMS:-$(seq 0 $((n - 1)))}; do
          timeout 60 /tmp/cc "$sh" "$a" 2>&1 | tee -a "$OUT/cc.log"; done; done ;;
    ab) timeout "${AB_LIMIT:-300}" python3 "$here/cc_ab.py" "$OUT/cc_ab.json" 2>&1 | tee "$OUT/cc_ab.log" ;;
    table) timeout "${TABLE_LIMIT:-300}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16 --quick} \
             --output "$OUT/kernels${TABLE_TAG}" 2>&1 | tail -40 > "$OUT/table${TABLE_TAG}.log"; tail -14 "$OUT/table${TABLE_TAG}.log" ;;
    tests) timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider ${TESTS} ${TEST_K:+-k "$TEST_K"} 2>&1 \
             | tail -25 | tee "$OUT/pytest${TEST_TAG}.log" ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" \
           --formats "${E2E_FORMATS:-w4a16}" --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 \
           --output "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" 2>&1 \
           | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
           | tee "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|wrote" | cut -c1-260 ;;
    pack) cd "$OUT" && for d in kernels* e2e_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done; cd - > /dev/null ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
