set -o pipefail
# Session 38, call 2: (1) Nsight Compute on the W4A16 Triton tensor-core tile at 64 tokens (m64_ncu_probe.py: 8B q/o,
# 70B k/v, and cuBLAS fp16 on 8B q/o), the second call of each arm; (2) the 2:4 kernel table in full (session 36's run
# was cut before the 70B rows).
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
here=bench/results/h200/kernels_s38
python3 $here/m64_ncu_probe.py 2>&1 | grep -v warn | tee $OUT/m64_eager.log
timeout 200 ncu --clock-control none -k regex:"w4a16_tc|gemm|nvjet|sm90" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
  python3 $here/m64_ncu_probe.py "tc 8B q/o" > $OUT/ncu_tc_qo.txt 2>&1; echo "ncu rc $?"
for arm in "tc 70B k/v" "fp16 8B q/o"; do
  tag=$(echo "$arm" | tr -c 'a-zA-Z0-9\n' '_')
  timeout 100 ncu --clock-control none -k regex:"w4a16_tc|gemm|nvjet|sm90|gemv" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    python3 $here/m64_ncu_probe.py "$arm" > "$OUT/ncu_$tag.txt" 2>&1; echo "ncu $arm rc $?"
done
grep -h -E "^  [A-Za-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|No Eligible|Registers Per|Achieved Occupancy|Grid Size|Block Size|Stall|Executed Ipc A|Dynamic Shared" $OUT/ncu_*.txt | cut -c1-160 | head -90
echo "ncu done at $SECONDS s"
timeout $((560 - SECONDS)) python3 -m compress.bench.kernels --suite sparse24 --output $OUT/kernels_sp24 2>&1 \
  | grep -v -E "warn|^ *$" | tail -30 | cut -c1-250
echo "table done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
