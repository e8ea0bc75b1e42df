#!/bin/bash
# Session 24 device calls (repository root, kind nvidia-h100-x1; $OUT from the device tool):
#   STAGES="tests sweep" bash bench/results/h100/kernels_s24/run.sh
. "$(dirname "$0")/../device_env.sh"
for stage in $STAGES; do
  case $stage in
    tests) timeout "${TEST_LIMIT:-200}" python3 -m pytest -q -m gpu ${TESTS:-tests/test_sp24_w16_gemv.py} 2>&1 | tail -25 | tee "$OUT/pytest.log" ;;
    probe) timeout 60 python3 -c "
from kernels import sp24_w16_gemv as spw
got = spw.probe_layout('cuda')
print('a_ok', got['a_ok'], 'meta_ok', got['meta_ok'])
print('A', sorted(got['a'].items()))
print('META', sorted((k, v) for k, v in got['meta'].items() if v is not None))
" 2>&1 | tee "$OUT/probe.log" ;;
    sweep) timeout "${SWEEP_LIMIT:-300}" python3 bench/results/h100/kernels_s24/sweep.py "$OUT/sweep.json" ${SWEEP_M:-1} \
              2>&1 | tee "$OUT/sweep.log" ;;
    ncu) timeout "${NCU_LIMIT:-240}" ncu --clock-control none --profile-from-start off --section SpeedOfLight \
           --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
           --metrics dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum \
           python3 bench/results/h100/kernels_s24/ncu_probe.py ${NCU_SHAPE:-28672x8192} > "$OUT/ncu.txt" 2>&1; tail -5 "$OUT/ncu.txt" ;;
    table) timeout "${TABLE_LIMIT:-400}" python3 -m compress.bench.kernels ${TABLE_ARGS:---suite sparse24} --output "$OUT/kernels" 2>&1 \
             | tail -40 > "$OUT/table.log"; tail -12 "$OUT/table.log" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
