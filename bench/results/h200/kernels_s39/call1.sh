set -o pipefail
# Session 39, call 1: the one-product-a-step W4A16 tile (onedot_probe.py) against the served tiles at 16-64 tokens;
# then the GPU tests of session 38's last change (one cached capability: arch, pdl_enabled, the VPTQ kernel's check).
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
timeout 330 python3 bench/results/h200/kernels_s39/onedot_probe.py $OUT/onedot.json 2>&1 | grep -v -E "warn|^ *$" \
  | tee $OUT/onedot.log | cut -c1-900
echo "probe done at $SECONDS s"
timeout $((560 - SECONDS)) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_s13_w4a16_pdl.py \
  tests/test_vptq_gemm_cuda.py tests/test_w4a16_ws.py tests/test_op_dispatch.py 2>&1 | tail -4 | tee $OUT/gpu_tests.log
echo "tests done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
