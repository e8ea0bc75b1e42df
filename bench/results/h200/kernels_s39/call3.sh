set -o pipefail
# Session 39, call 3: the CUDA launchers' host cost. The one-token W4A16 GEMVs and the 2-16-token GEMM asked the CUDA
# runtime for occupancy and the shared-memory limit on every launch; now once (kernels/csrc/launch_ex.cuh
# resident_ctas), and every ctypes launcher takes its stream from torch's raw-stream call (cuda_build.stream_handle).
# launch_cost.py times one call against session 38's library (carried as .kcache/base.tar.xz), then the GPU tests of
# the touched launchers, then eager_profile.py's decode steps (fp16 / W4A16 / W8A8; call 2 had 20-31 / 44-48 / 21-22 ms).
touch /tmp/call_start  # pack only what this call writes under $OUT
# session 38's source, carried untracked (not committed; recreate before the call with
#   git show baf2604:kernels/csrc/w4a16_ws_gemv.cu > bench/results/h200/kernels_s39/w4a16_ws_gemv_s38.cu)
cp bench/results/h200/kernels_s39/w4a16_ws_gemv_s38.cu kernels/csrc/
STAGES="kcache base" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -3
. bench/results/h100/device_env.sh > /dev/null
timeout 120 python3 bench/results/h200/kernels_s39/launch_cost.py $OUT/launch_cost.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/launch_cost.log
echo "launch cost done at $SECONDS s"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_launch_host_cost.py tests/test_w4a16_ws.py \
  tests/test_w4a16_cc.py tests/test_w4a16_ws_gemm.py tests/test_i8_gemv.py tests/test_sp24_w16_gemv.py \
  tests/test_vptq_gemm_cuda.py tests/test_s8_vptq_cluster.py tests/test_w4a16_cuda.py 2>&1 | tail -6 | tee $OUT/gpu_tests.log
echo "tests done at $SECONDS s"
PROFILE_FORMATS=fp16,w4a16,w8a8 timeout $((560 - SECONDS)) python3 bench/results/h200/kernels_s39/eager_profile.py \
  $OUT/eager_profile.json 2>&1 | grep -v -E "warn|^ *$" > $OUT/eager_profile.log
grep "==" $OUT/eager_profile.log
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
