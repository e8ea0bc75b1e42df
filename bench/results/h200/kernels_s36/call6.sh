set -o pipefail
# Session 36, call 6: the review's mend (one LaunchConfig in launch_ex.cuh serves the launches, the WS GEMM's cluster
# occupancy query and the VPTQ cluster GEMV's launch and occupancy query): the GPU tests of the libraries it touches.
R=bench/results/h200/kernels_s36/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
P="python3 -m pytest -q -p no:cacheprovider"
timeout 150 $P tests/test_w4a16_ws_gemm.py -k "not every_config or 4096x4096 or 14336x4096" 2>&1 | tail -2 | tee $OUT/pytest_wsm.log
timeout 90 $P tests/test_s8_vptq_cluster.py 2>&1 | tail -2 | tee $OUT/pytest_vptq_cluster.log
timeout 60 $P tests/test_w4a16_cuda.py -k "cluster or programmatic" tests/test_i8_gemv.py 2>&1 | tail -2 | tee $OUT/pytest_tc_i8.log
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
