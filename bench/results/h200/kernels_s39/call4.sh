set -o pipefail
# Session 39, call 4: is call 3's W4A16 eager decode step (20.5-20.9 ms, call 2 44-48 ms) the launch change or the
# machine? launch_cost.py again, now also layers of another K in turns (one kernel, its shared memory changing each
# call) against session 38's library; eager_ab.py: fp16 / W8A8 / W4A16 now / W4A16 with session 38's launch, in turns
# in one process. kernels/csrc/w4a16_ws_gemv_s38.cu = `git show baf2604:kernels/csrc/w4a16_ws_gemv.cu`, carried.
touch /tmp/call_start  # pack only what this call writes under $OUT
# session 38's source, carried untracked (not committed; recreate before the call with
#   git show baf2604:kernels/csrc/w4a16_ws_gemv.cu > bench/results/h200/kernels_s39/w4a16_ws_gemv_s38.cu)
cp bench/results/h200/kernels_s39/w4a16_ws_gemv_s38.cu kernels/csrc/
STAGES="kcache base" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -3
. bench/results/h100/device_env.sh > /dev/null
timeout 120 python3 bench/results/h200/kernels_s39/launch_cost.py $OUT/launch_cost.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/launch_cost.log | grep -E "alternating|ctypes|_launch"
echo "launch cost done at $SECONDS s"
AB_ROUNDS=5 AB_STEPS=30 timeout $((540 - SECONDS)) python3 bench/results/h200/kernels_s39/eager_ab.py $OUT/eager_ab.json 2>&1 \
  | grep -v -E "warn|^ *$" | tee $OUT/eager_ab.log
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
