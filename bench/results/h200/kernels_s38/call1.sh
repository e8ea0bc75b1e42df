set -o pipefail
# Session 38, call 1: the W4A16 launch configs at 33..64 and 17..32 tokens had never been swept on the H200 (its
# tables came from the H100: kernels/w4a16.py SHAPE_TUNED, session 12; kernels/w4a16_cuda.py TUNED buckets 32 / 64).
# The three rows slower than fp16 at 64 tokens (8B k/v, 70B k/v, 8B q/o) and the same shapes at 32 tokens:
# - kernels_s12/sweep.py: the Triton tensor-core tiles x every split count (grid <= 300), rotate timing, one process;
# - kernels_s25/sweep.py: the CUDA tensor-core GEMV's builds x waves 0.5 / 1 / 2 x the cluster reduction off / on.
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
SWEEP_MS=64,32 SWEEP_SHAPES="1024x4096,1024x8192,4096x4096" SWEEP_LIMIT_S=330 \
  timeout 400 python3 bench/results/h100/kernels_s12/sweep.py $OUT/tri 2>&1 | grep -v -E "warn|^ *$" \
  | grep -v "] warm" | tee $OUT/tri_sweep.log | cut -c1-400
echo "triton sweep done at $SECONDS s"
SWEEP_VARIANTS="w16b2s2,w16b2s3,w8b2s2r2,w8b2s3r2,w4b2s3r2,w4b2s4r2,w8b2s4,w8b2s3,w16b2s2k4,w16b2s2k8,w16b2s2k16,w16b2s3k4,w8b2s3k4,w4b2s4" \
SWEEP_WAVES="0.5,1,2" SWEEP_CLUSTER="0,1" SWEEP_SHAPES="1024,4096;1024,8192;4096,4096" \
  timeout $((540 - SECONDS)) python3 bench/results/h100/kernels_s25/sweep.py $OUT/cuda_sweep.json $OUT/cuda_picks.json 64 32 2>&1 \
  | grep -v -E "warn|^ *$" | tee $OUT/cuda_sweep.log | cut -c1-230
echo "cuda sweep done at $SECONDS s"
cat $OUT/tri/picks.json $OUT/cuda_picks.json
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
