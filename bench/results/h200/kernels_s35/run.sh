#!/bin/bash
# Session 35 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tests chain" bash bench/results/h200/kernels_s35/run.sh
# Stage of its own (every other stage is kernels_s34/run.sh's, and through it kernels_s33's and kernels_s32's: kcache,
# tests, table, e2e, tune, notable, ...):
# chain: chain_ab.py (the WS GEMV letting the next kernel launch at its start, on a grid capped to leave it room;
#   CHAIN_ARMS, default all; SHAPES_ARCH picks the model), $OUT/chain${CHAIN_TAG}.json;
# tree: tree_ab.py (the WS GEMV's "tree" build against the shipped one, single calls), $OUT/tree_ab.json;
# wsncu: Nsight Compute on ws_ncu_probe.py (the WS GEMV's served config at one token, NCU_SHAPES), $OUT/ws_ncu.txt;
# grid: grid_ab.py (the WS GEMV on a persistent grid that gives every CTA the same row groups), $OUT/grid_ab.json.
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    chain) . "$here/../../h100/device_env.sh" > /dev/null
           timeout "${CHAIN_LIMIT:-300}" python3 "$here/chain_ab.py" "$OUT/chain${CHAIN_TAG}.json" $CHAIN_ARMS 2>&1 \
             | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
             | tee "$OUT/chain${CHAIN_TAG}.log" | grep --line-buffered -E "round|median|Error|error" | cut -c1-200 ;;
    tree) . "$here/../../h100/device_env.sh" > /dev/null
          timeout "${TREE_LIMIT:-200}" python3 "$here/tree_ab.py" "$OUT/tree_ab.json" 2>&1 | grep -v -E "warn|^ *$" \
            | tee "$OUT/tree_ab.log" | cut -c1-250 ;;
    wsncu) . "$here/../../h100/device_env.sh" > /dev/null
           timeout "${NCU_LIMIT:-200}" ncu --clock-control none -k regex:"w4ws" --launch-count "${NCU_COUNT:-12}" \
             --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
             --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
             python3 "$here/ws_ncu_probe.py" ${NCU_SHAPES} > "$OUT/ws_ncu.txt" 2>&1; echo "ncu rc $?"
           grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per|Stall|call [0-9]" \
             "$OUT/ws_ncu.txt" | head -60 ;;
    grid) . "$here/../../h100/device_env.sh" > /dev/null
          timeout "${GRID_LIMIT:-240}" python3 "$here/grid_ab.py" "$OUT/grid_ab.json" 2>&1 \
            | grep -v -E "Online softmax|split the reduction|important use case|^softmax|lowering.py|warnings.warn|^ *$|_warn_once" \
            | tee "$OUT/grid_ab.log" | grep --line-buffered -E "grid|round|median|Error|error" | cut -c1-200 ;;
    *) STAGES=$stage bash "$here/../kernels_s34/run.sh" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
