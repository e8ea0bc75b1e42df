#!/usr/bin/env bash
# Session 8, VPTQ cluster kernel on the device (run tool, kind nvidia-h100-x1), from the repo root:
#   LIMIT=270 STAGES="tests probe" bash bench/results/h100/kernels_s8_vptq/device_run.sh
# Stages: tests (GPU tests of both VPTQ CUDA kernels), probe (probe.py: every launch vs split-K vs torch),
# table (the seed-000 table through `compress bench kernels --suite vptq`, METHODS="rotate flush").
# Inner limits count from the script's start, so the call's own limit is never hit mid-stage. The run
# tool returns at most 8 files: logs of the tables stay in /tmp (their tails are printed).
set -u
START=$(date +%s)
LIMIT=${LIMIT:-270}
STAGES=${STAGES:-"tests table probe"}
METHODS=${METHODS:-"rotate flush"}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
export PYTHONUNBUFFERED=1 COMPRESS_KERNEL_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 - <<'PY'
import time, torch
from kernels import vptq_cluster, vptq_cuda
t = time.time()
vptq_cluster.prebuild(torch.device("cuda"), [(12, 8), (13, 9), (12, 9), (13, 8), (12, 0), (13, 0)])
vptq_cuda.prebuild(torch.device("cuda"), ["w16", "w16b"])
print(f"built in {time.time() - t:.1f} s")
PY
for stage in $STAGES; do
  case $stage in
    tests)
      T=$(( $(left) < 90 ? $(left) : 90 ))
      if [ "$T" -gt 10 ]; then
        timeout "$T" python3 -m pytest -q -p no:cacheprovider tests/test_s8_vptq_cluster.py tests/test_kernels_vptq.py \
          -k "cuda or cluster or launch or graph or real_shapes" > "$OUT/pytest.log" 2>&1
        echo "pytest_rc=$?"; grep -E "passed|failed|Error" "$OUT/pytest.log" | tail -8
      fi ;;
    probe)
      T=$(( $(left) - 5 ))
      if [ "$T" -gt 20 ]; then
        timeout "$T" python3 bench/results/h100/kernels_s8_vptq/probe.py --out "$OUT" --budget-s $(( T - 25 )) \
          > "$OUT/probe.log" 2>&1
        echo "probe_rc=$?"; cat "$OUT/probe.log" | cut -c1-260
      fi ;;
    table)
      for m in $METHODS; do
        T=$(( $(left) - 5 ))
        if [ "$T" -gt 20 ]; then
          timeout "$T" python3 -m compress.bench.kernels --suite vptq --timing "$m" --output "$OUT/table_$m" \
            > "/tmp/table_$m.log" 2>&1
          echo "table_${m}_rc=$?"; tail -3 "/tmp/table_$m.log"; grep -E "median ratio|every row" "$OUT/table_$m/kernels.md"
        fi
      done ;;
  esac
done
echo "done in $(( $(date +%s) - START )) s"
