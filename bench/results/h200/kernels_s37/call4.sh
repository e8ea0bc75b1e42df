set -o pipefail
# Session 37, call 4: re-tune the tensor-core W4A16 GEMV's launch configs on the H200 for this session's kernel at 16
# and 8 tokens (kernels_s25/sweep.py: the served config against 14 builds x waves 0.5 / 1 x the cluster reduction off /
# on, rotate timing, one process; picks where an arm beat the served config by more than 2% at both its timings).
R=bench/results/h200/kernels_s37/run.sh
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash $R 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
SWEEP_VARIANTS="w16b2s2,w16b2s3,w8b2s2r2,w8b2s3r2,w4b2s3r2,w4b2s4r2,w8b2s4,w8b2s3,w16b2s2k4,w16b2s2k8,w16b2s2k16,w16b2s3k4,w8b2s3k4,w4b2s4" \
SWEEP_WAVES="0.5,1" SWEEP_CLUSTER="0,1" \
SWEEP_SHAPES="4096,4096;1024,4096;14336,4096;4096,14336;8192,8192;1024,8192;28672,8192;8192,28672;6144,4096;28672,4096" \
  timeout 440 python3 bench/results/h100/kernels_s25/sweep.py $OUT/sweep.json $OUT/picks.json 16 8 2>&1 \
  | grep -v -E "warn|^ *$" | tee $OUT/sweep.log | cut -c1-230
cat $OUT/picks.json
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
