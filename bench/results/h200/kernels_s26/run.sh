#!/bin/bash
# Session 26 device calls (repository root, kind nvidia-h200; $OUT from the device tool):
#   STAGES="build tests sweep table" bash bench/results/h200/kernels_s26/run.sh
# build: every int8 GEMV build (kernels/i8_gemv.py VARIANTS) in parallel nvcc processes; tests: the GPU tests (TESTS,
# -k TEST_K); sweep: sweep_i8.py at SWEEP_M (writes $OUT/picks.json); table: `compress bench kernels` (TABLE_ARGS)
# with the sweep's picks when PICKS=1 (COMPRESS_I8_DENSE_PICKS=$OUT/picks.json); e2e: `compress bench e2e` on
# synthetic E2E_ARCH weights, formats E2E_FORMATS, workloads E2E_WORKLOADS; copy: the copy bandwidth as the kernel
# table timed it before this session (inside a CUDA graph) against kernel_timing.copy_bandwidth_gbs.
. "$(dirname "$0")/../../h100/device_env.sh"
for stage in $STAGES; do
  case $stage in
    copy) timeout 60 python3 -c "
import torch
from compress.bench import kernel_timing as kt
src = torch.randn(2**29, device='cuda').half(); dst = torch.empty_like(src)
graph = kt.call_ms(lambda _w: dst.copy_(src), None, 'rotate', min_calls=10)
print(f'1 GiB copies in one CUDA graph (the kernel table before 09ee36c): {2 * src.numel() * 2 / graph / 1e6:.0f} GB/s')
del src, dst
print(f'kernel_timing.copy_bandwidth_gbs (2 GiB eager copies; the kernel tables and the e2e bound): {kt.copy_bandwidth_gbs():.0f} GB/s')" 2>&1 | tee "$OUT/copy.log" ;;
    build) timeout "${BUILD_LIMIT:-240}" python3 -c "
import time, torch
from concurrent.futures import ThreadPoolExecutor
from kernels import cuda_build, i8_gemv
t, arch = time.time(), cuda_build.arch(torch.device('cuda'))
with ThreadPoolExecutor(len(i8_gemv.VARIANTS)) as pool:
    list(pool.map(lambda nm: i8_gemv.compile_variant(arch, nm), i8_gemv.VARIANTS))
print(f'built {sorted(i8_gemv.VARIANTS)} in {time.time() - t:.0f} s')" 2>&1 | tail -3 | tee "$OUT/build.log" ;;
    tests) timeout "${TEST_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_i8_shared_tile.py tests/test_i8_gemv.py} \
             ${TEST_K:+-k "$TEST_K"} 2>&1 | tail -25 | tee "$OUT/pytest.log" ;;
    sweep) timeout "${SWEEP_LIMIT:-240}" python3 bench/results/h200/kernels_s26/sweep_i8.py "$OUT/sweep.json" "$OUT/picks.json" \
             ${SWEEP_M:-2 4 8 16} 2>&1 | tee "$OUT/sweep.log" | grep -v "^    NOT" ;;
    table) [ "${PICKS:-0}" = 1 ] && [ -f "$OUT/picks.json" ] && export COMPRESS_I8_DENSE_PICKS="$OUT/picks.json"
           timeout "${TABLE_LIMIT:-300}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite w8a8} --output "$OUT/kernels${TABLE_TAG}" 2>&1 \
             | tail -40 > "$OUT/table${TABLE_TAG}.log"; tail -14 "$OUT/table${TABLE_TAG}.log"; unset COMPRESS_I8_DENSE_PICKS ;;
    e2e) timeout "${E2E_LIMIT:-300}" python3 -m compress.bench.e2e --synthetic "${E2E_ARCH:-llama-3-8b}" \
           --formats "${E2E_FORMATS:-fp16,w4a16,w8a8}" --workloads "${E2E_WORKLOADS:-decode_bound}" --runs 3 \
           --output "$OUT/e2e_${E2E_ARCH:-llama-3-8b}" 2>&1 \
           | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
           | tee "$OUT/e2e_${E2E_ARCH:-llama-3-8b}.log" | grep --line-buffered -E "TPOT|bound|FAILED|Error|error|wrote" | cut -c1-260 ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
# Few files come back from a call: pack the folders.
cd "$OUT" && for d in kernels* e2e_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done; ls "$OUT"
