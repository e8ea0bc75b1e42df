#!/bin/bash
# Session 36 device calls (repository root, kind nvidia-h200; $OUT from the device tool), e.g.
#   STAGES="kcache tests cluster" bash bench/results/h200/kernels_s36/run.sh
# Stages of its own (every other stage is kernels_s35/run.sh's, and through it the earlier sessions': kcache, tests,
# table, e2e, ...):
# smoke: one cluster-reduction launch of the WS GEMM (8B gate/up, 16 tokens, every config) under a short timeout, so a
#   kernel that hangs costs a minute, not the call;
# cluster: cluster_ab.py (the WS GEMM's split of K through a cluster against the workspace, the served tensor-core GEMV
#   and fp16; AB_CONFIGS, AB_M, AB_SHAPES), $OUT/cluster_ab${AB_TAG}.json;
# wsmncu: Nsight Compute on wsm_ncu_probe.py (the WS GEMM at 8 and 16 tokens beside the one-token WS GEMV and the served
#   tensor-core GEMV, 8B gate/up), $OUT/wsm_ncu.txt;
# stalls: Nsight Compute's warp stall reasons (WarpStateStats and SourceCounters, all details) for one call each of the
#   WS GEMM at 8 and 16 tokens and the one-token WS GEMV, $OUT/stalls_*.txt.
here="$(dirname "$0")"
for stage in $STAGES; do
  case $stage in
    smoke) . "$here/../../h100/device_env.sh" > /dev/null
           timeout "${SMOKE_LIMIT:-90}" python3 -c "
import torch
from kernels import w4a16_ws_gemm as wsm
from kernels.cases import make_int4, rel_err
from kernels.w4a16 import w4a16_linear_ref
p = make_int4(14336, 4096, 128, True, torch.float16, 'cuda', seed=1)
x = torch.randn(16, 4096, device='cuda').half()
want = w4a16_linear_ref(x, p['qweight'], p['scales'], None, 128)
for c in range(len(wsm.CONFIGS)):
    if wsm.fits(16, 4096, c, 128, False, x.device, cluster=True):
        got = wsm._launch(x, p['qweight'], p['scales'], None, 128, c, cluster=True)
        torch.cuda.synchronize()
        print(c, wsm.split(16, 4096, c), wsm.clustered(16, 4096, c, True), f'{rel_err(got, want):.2e}', flush=True)
" 2>&1 | grep -v warn | tee "$OUT/smoke.log"; echo "smoke rc ${PIPESTATUS[0]}" ;;
    cluster) . "$here/../../h100/device_env.sh" > /dev/null
             timeout "${AB_LIMIT:-280}" python3 "$here/cluster_ab.py" "$OUT/cluster_ab${AB_TAG}.json" 2>&1 \
               | grep -v -E "warn|^ *$" | tee "$OUT/cluster_ab${AB_TAG}.log" | cut -c1-260 ;;
    wsmncu) . "$here/../../h100/device_env.sh" > /dev/null
            timeout "${NCU_LIMIT:-240}" ncu --clock-control none -k regex:"w4ws|w4a16_gemv" --launch-count 20 \
              --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
              --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
              --section ComputeWorkloadAnalysis --section InstructionStats \
              python3 "$here/wsm_ncu_probe.py" > "$OUT/wsm_ncu.txt" 2>&1; echo "ncu rc $?"
            grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Registers Per|call [0-9]" \
              "$OUT/wsm_ncu.txt" | head -60 ;;
    stalls) . "$here/../../h100/device_env.sh" > /dev/null
            for arm in "wsm c2 M=8" "wsm c10 M=16" "ws gemv M=1"; do  # the second call of each (the first warms up)
              tag=$(echo "$arm" | tr -c 'a-zA-Z0-9\n' '_')
              timeout "${NCU_LIMIT:-120}" ncu --clock-control none -k regex:"w4ws" --launch-skip 1 --launch-count 1 \
                --section WarpStateStats --section SourceCounters --print-details all --import-source no \
                python3 "$here/wsm_ncu_probe.py" "$arm" > "$OUT/stalls_$tag.txt" 2>&1; echo "ncu $arm rc $?"
              grep -E "Stall|stall|Warp Cycles Per" "$OUT/stalls_$tag.txt" | head -40 | cut -c1-200
            done ;;
    *) STAGES=$stage bash "$here/../kernels_s35/run.sh" ;;
  esac
  echo "stage $stage done at $SECONDS s"
done
