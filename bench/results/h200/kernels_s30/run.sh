#!/bin/bash
# Session 30 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="whl kcache tests wscheck ws" bash bench/results/h200/kernels_s30/run.sh
# Stages:
# whl: install the wheels carried in .whl (gemlite, a peer of the W4A16 table) into /tmp/site, on PYTHONPATH;
# kcache: bench/kernel_cache.py unpack .kcache/kernels.tar.xz (built on the CPU machine; `carry` .kcache), timed;
# tests: the GPU tests (TESTS, -k TEST_K);
# wscheck: ws_ab.py check, one process per WS config (WS_CONFIGS, default all), each under a timeout (a kernel that
#   hangs costs its own process only); the passing configs go on to `ws`;
# diag: ws_ab.py diag (the ring alone: a build whose consumers only read the weights, against the real kernel);
# ws: ws_ab.py time (the warp-specialized GEMV against the served tensor-core and CUDA-core GEMVs), $OUT/ws_ab.json;
# table: `compress bench kernels` (TABLE_ARGS, default the W4A16 table);
# e2e: `compress bench e2e` on synthetic E2E_ARCH weights (E2E_FORMATS, E2E_WORKLOADS), E2E_TAG names the folder;
# pack: the result folders as .tgz (few files come back).
. "$(dirname "$0")/../../h100/device_env.sh"
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    whl) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
           2>&1 | tail -2; export PYTHONPATH="$PYTHONPATH:/tmp/site"; python3 -c "import gemlite; print('gemlite', gemlite.__version__)" ;;
    kcache) ( time python3 bench/kernel_cache.py unpack .kcache/kernels.tar.xz ) 2>&1 | tail -4 | tee "$OUT/kcache.log" ;;
    tests) timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider ${TESTS} ${TEST_K:+-k "$TEST_K"} 2>&1 \
             | tail -25 | tee "$OUT/pytest${TEST_TAG}.log" ;;
    wscheck) timeout 120 python3 -c "import sys; sys.argv=['x']; sys.path.insert(0, '$here'); import ws_ab; ws_ab.lib()" \
               2>&1 | tail -3
             ok=""
             for c in ${WS_CONFIGS:-0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16}; do
               timeout 60 python3 "$here/ws_ab.py" check "$c" 2>&1 | tail -6 | tee -a "$OUT/wscheck.log" && ok="$ok $c"
             done
             export WS_CONFIGS="$ok"; echo "passing: $ok" | tee -a "$OUT/wscheck.log" ;;
    diag) timeout 200 python3 "$here/ws_ab.py" diag 2>&1 | tee "$OUT/diag.log" ;;
    ws) [ -n "$(echo $WS_CONFIGS)" ] && timeout "${WS_LIMIT:-300}" python3 "$here/ws_ab.py" time "$OUT/ws_ab.json" 2>&1 \
          | tee "$OUT/ws_ab.log" ;;
    table) timeout "${TABLE_LIMIT:-300}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16} \
             --output "$OUT/kernels${TABLE_TAG}" 2>&1 | tail -40 > "$OUT/table${TABLE_TAG}.log"; tail -14 "$OUT/table${TABLE_TAG}.log" ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" \
           --formats "${E2E_FORMATS:-w4a16}" --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 \
           --output "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" 2>&1 \
           | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
           | tee "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|wrote" | cut -c1-260 ;;
    pack) cd "$OUT" && for d in kernels* e2e_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done; cd - > /dev/null ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
