#!/bin/bash
# Session 37 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tests offset" bash bench/results/h200/kernels_s37/run.sh
# Stages of its own (every other stage is kernels_s36/run.sh's, and through it the earlier sessions': kcache, tests,
# table, e2e, ...):
# base: unpack .kcache/base.tar.xz, the A/B's other libraries (built on the CPU machine: session 36's tensor-core
#   GEMV from kernels/csrc/w4a16_gemv_s36.cu, which the call carries untracked, and this session's with
#   -DW4_OFFSET=0; see offset_ab.py) and the -DW4_XFORM=1 builds the tests load;
# offset: offset_ab.py (this session's tensor-core GEMV against session 36's; AB_M, AB_CASES, AB_SHAPES, AB_REPEAT),
#   $OUT/offset_ab${AB_TAG}.json.
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    base) . "$here/../../h100/device_env.sh" > /dev/null
          python3 bench/kernel_cache.py unpack .kcache/base.tar.xz 2>&1 | tail -2 | cut -c1-300 ;;
    offset) . "$here/../../h100/device_env.sh" > /dev/null
            timeout "${AB_LIMIT:-280}" python3 "$here/offset_ab.py" "$OUT/offset_ab${AB_TAG}.json" 2>&1 \
              | grep -v -E "warn|^ *$" | tee "$OUT/offset_ab${AB_TAG}.log" | cut -c1-220 ;;
    *) STAGES=$stage bash "$here/../kernels_s36/run.sh" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
