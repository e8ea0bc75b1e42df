set -o pipefail
# Session 38, call 6: what the direct launch does for a transformers caller: `compress bench e2e --engine hf` (the
# model's own forward, as transformers' generate runs it on a compress.runtime model), no CUDA graphs, the custom op
# forced (COMPRESS_KERNEL_DISPATCH=op) and direct, in alternate processes.
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
for mode in op direct op direct; do
  COMPRESS_KERNEL_DISPATCH=$mode timeout $((200 - SECONDS)) python3 -m compress.bench.e2e --synthetic llama-3-8b \
    --formats w4a16 --workloads interactive --runs 1 --engine hf --no-cuda-graphs --output $OUT/e2e_hf_$mode$SECONDS 2>&1 \
    | grep -E "interactive:" | head -2 | cut -c1-200
  echo "e2e $mode done at $SECONDS s"
  [ $SECONDS -gt 150 ] && break
done
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
