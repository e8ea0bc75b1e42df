set -o pipefail
# Session 39, call 8: Nsight Compute on the one-token W4A16 GEMVs (m1_ncu_probe.py): the tensor-core and the
# warp-specialized GEMV on 8B down (the row that keeps the M = 1 median under 3.0x), the WS GEMV on 8B and 70B gate/up.
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "done" | tail -1
. bench/results/h100/device_env.sh > /dev/null
here=bench/results/h200/kernels_s39
python3 $here/m1_ncu_probe.py 2>&1 | grep -v warn | tee $OUT/m1_eager.log
for arm in "cuda 8B down" "ws 8B down" "ws 8B gate/up" "ws 70B gate/up"; do
  tag=$(echo "$arm" | tr -c 'a-zA-Z0-9\n' '_')
  timeout 90 ncu --clock-control none -k regex:"w4a16_gemv_kernel|w4ws_kernel" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --section InstructionStats \
    python3 $here/m1_ncu_probe.py "$arm" > "$OUT/ncu_$tag.txt" 2>&1; echo "ncu $arm rc $? at $SECONDS s"
done
grep -h -E "^  [A-Za-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Theoretical Occupancy|Grid Size|Block Size|Waves Per SM|Dynamic Shared|Executed Instructions  " $OUT/ncu_*.txt | cut -c1-150 | head -80
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
