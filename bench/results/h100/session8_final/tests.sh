#!/usr/bin/env bash
# Session 8's GPU test call (run tool, kind nvidia-h100-x1), from the repo root:
#   LIMIT=500 bash bench/results/h100/session8_final/tests.sh
# The GPU tests of every kernel file changed this session, one pytest process per file (a CUDA fault in one
# cannot take the others down), each with its share of the time. Logs: $OUT/tests.tgz.
set -u
LIMIT=${LIMIT:-500}
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
export PYTHONUNBUFFERED=1 COMPRESS_KERNEL_CACHE=/tmp/kc
R=/tmp/tests; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
run() {  # file, seconds
  local f=$1 t=$2 name; name=$(basename $f .py)
  [ "$t" -gt "$(left 5)" ] && t=$(left 5)
  [ "$t" -lt 20 ] && { echo "$name skipped"; return; }
  timeout $t python3 -m pytest -q -p no:cacheprovider $f > $R/$name.log 2>&1
  echo "[$SECONDS s] $name rc=$? $(grep -hE '[0-9]+ (passed|failed)' $R/$name.log | tail -1)"
  grep -hE "^FAILED" $R/$name.log | head -5 | cut -c1-200
}
run tests/test_s8_vptq_cluster.py 110
run tests/test_kernels_vptq.py 60
run tests/test_s8_w4a16_wide.py 80
run tests/test_w4a16_cuda.py 110
run tests/test_s7_decode_fused.py 70
run tests/test_s7_w8a8_tma.py 60
tar czf $OUT/tests.tgz -C /tmp tests
echo "done in $SECONDS s"
