set -o pipefail
# Session 33, call 7 (the last 98 device seconds; main at b27e8a2): the WS GEMV's config argument on the GPU (7e3f97e).
. bench/results/h100/device_env.sh > /dev/null
python3 bench/kernel_cache.py unpack .kcache/kernels.tar.xz > /dev/null 2>&1
timeout 60 python3 -m pytest -q -p no:cacheprovider -x tests/test_w4a16_ws.py -k "config_argument or custom_op or search_configs" 2>&1 | tail -4 | tee $OUT/pytest.log
