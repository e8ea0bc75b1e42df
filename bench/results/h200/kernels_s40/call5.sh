set -o pipefail
# Session 40, call 5 (kind nvidia-h200-x2), at 38824e9: the GPU tests that `-m gpu` had deselected (their files'
# `gpu` helper lacked the mark), and the CPU-or-GPU runtime tests, without -m, in two streams, one a GPU, a file at a
# time (each with its own limit, so that a slow file does not hide the others' results). As run, the full logs went to
# $OUT$OUT/... (fixed since), so only the summaries came back; call 6 reran the files with failures.
touch /tmp/call_start
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | grep -E "load|done" | tail -2
. bench/results/h100/device_env.sh > /dev/null
python3 bench/kernel_cache.py unpack .kcache/vptq.tar.xz 2>&1 | tail -1
stream() {  # GPU, log, files...
  local g=$1 log=$2; shift 2
  for f in "$@"; do
    left=$((540 - SECONDS)); [ $left -lt 20 ] && { echo "$f: not run (time)" >> $log; continue; }
    r=$(CUDA_VISIBLE_DEVICES=$g timeout $left python3 -m pytest -q -p no:cacheprovider $f 2>&1 | tee -a ${log%.txt}_full.log | tail -1)
    echo "$f: $r (at $SECONDS s)" >> $log
  done
}
stream 0 $OUT/stream0.txt tests/test_launch_host_cost.py tests/test_w4a16_ws.py tests/test_w4a16_cc.py \
  tests/test_op_dispatch.py tests/test_runtime_path_cache.py tests/test_runtime_formats.py tests/test_runtime_fastpath.py \
  tests/test_s9_decode_silu.py &
s0=$!
stream 1 $OUT/stream1.txt tests/test_i8_gemv.py tests/test_w4a16_ws_gemm.py tests/test_s7_decode_fused.py \
  tests/test_w4a16_shared_tile.py tests/test_s8_w4a16_wide.py tests/test_w4a16_cuda.py &
s1=$!
wait $s0 $s1
cat $OUT/stream0.txt $OUT/stream1.txt | cut -c1-250
grep -hE "^FAILED|^ERROR" $OUT/stream*_full.log | head -20 | cut -c1-250
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
