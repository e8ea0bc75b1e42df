#!/bin/bash
# Session 32 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tests wsmcheck wsm" bash bench/results/h200/kernels_s32/run.sh
# Stages:
# whl: install the wheels carried in .whl (gemlite, a peer of the W4A16 table) into /tmp/site, on PYTHONPATH;
# kcache: bench/kernel_cache.py unpack .kcache/kernels.tar.xz (built on the CPU machine; `carry` .kcache), timed;
# tests: the GPU tests (TESTS, -k TEST_K);
# wsmbuild: build the WS GEMM and GEMV libraries with nvcc here (their sources changed since .kcache was packed);
# wsmcheck: wsm_ab.py check, one process per WS GEMM config (WSM_CONFIGS, default all), each under a timeout (a kernel
#   that hangs costs its own process only); the passing configs go on to `wsm`;
# wsm: wsm_ab.py time (the warp-specialized GEMM for 2-16 tokens against the served tensor-core GEMV and fp16),
#   $OUT/wsm_ab.json;
# table: `compress bench kernels` (TABLE_ARGS, default the W4A16 table);
# e2e: `compress bench e2e` on synthetic E2E_ARCH weights (E2E_FORMATS, E2E_WORKLOADS), E2E_TAG names the folder;
# ablate: ablate.py (which launches of the W4A16 decode step cost what inside the CUDA graph), $OUT/ablate.json;
# pack: the result folders as .tgz (few files come back).
. "$(dirname "$0")/../../h100/device_env.sh"
here="$(dirname "$0")"
ab="$here/../kernels_s31/wsm_ab.py"
for stage in $STAGES; do
  case $stage in
    whl) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
           2>&1 | tail -2; export PYTHONPATH="$PYTHONPATH:/tmp/site"; python3 -c "import gemlite; print('gemlite', gemlite.__version__)" ;;
    kcache) ( time python3 bench/kernel_cache.py unpack .kcache/kernels.tar.xz ) 2>&1 | tail -4 | tee "$OUT/kcache.log" ;;
    tests) timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider ${TESTS} ${TEST_K:+-k "$TEST_K"} 2>&1 \
             | tail -25 | tee "$OUT/pytest${TEST_TAG}.log" ;;
    wsmbuild) ( time python3 -c "import torch; from kernels import w4a16_ws_gemm as g, w4a16_ws as w
from kernels.cuda_build import compile_parallel as cp; d = torch.device('cuda'); print(cp([lambda: g.build(d), lambda: w.build(d)]))" ) \
                2>&1 | tail -4 ;;
    wsmcheck) ok=""
             for c in ${WSM_CONFIGS:-0 1 2 3 4 5 6 7 8 9 10 11}; do
               timeout 90 python3 "$ab" check "$c" 2>&1 | tail -6 | tee -a "$OUT/wsmcheck.log" && ok="$ok $c"
             done
             export WSM_CONFIGS="$ok"; echo "passing: $ok" | tee -a "$OUT/wsmcheck.log" ;;
    wsm) [ -n "$(echo ${WSM_CONFIGS-x})" ] && timeout "${WSM_LIMIT:-300}" python3 "$ab" time "$OUT/wsm_ab${WSM_TAG}.json" \
           2>&1 | tee "$OUT/wsm_ab${WSM_TAG}.log" ;;  # unset (its own process, call 5): every config; set empty by wsmcheck: none
    table) timeout "${TABLE_LIMIT:-300}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w4a16} \
             --output "$OUT/kernels${TABLE_TAG}" 2>&1 | tail -40 > "$OUT/table${TABLE_TAG}.log"; tail -14 "$OUT/table${TABLE_TAG}.log" ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" \
           --formats "${E2E_FORMATS:-w4a16}" --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 \
           --output "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}" 2>&1 \
           | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
           | tee "$OUT/e2e_${E2E_ARCH:-llama-3-8b}${E2E_TAG}.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|wrote" | cut -c1-260 ;;
    ablate) timeout "${ABLATE_LIMIT:-240}" python3 "$here/ablate.py" "$OUT/ablate.json" $ABLATE_ARMS 2>&1 \
              | grep -v -E "warn|^ *$" | tee "$OUT/ablate.log" | grep -E "TPOT|Error|error" ;;
    pack) cd "$OUT" && for d in kernels* e2e_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done; cd - > /dev/null ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
