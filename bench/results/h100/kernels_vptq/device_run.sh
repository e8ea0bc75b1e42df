#!/usr/bin/env bash
# Call 2 of the VPTQ kernel work, as run on the device (run tool, kind nvidia-h100-x1), from the repo root:
#   bash bench/results/h100/kernels_vptq/device_run.sh
# 1. kernels/vptq_probe.py builds the CUDA variants, checks each against the reference and times them
#    on 16 seed-000 rows; it writes the variant with the lowest geometric-mean ratio to /tmp/choice.env.
# 2. The seed-000 table (all 120 rows) with that variant, through the benchmark harness itself.
# 3. The GPU tests of the CUDA kernel.
set -u
export PYTHONUNBUFFERED=1 COMPRESS_KERNEL_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
timeout 110 python3 -m kernels.vptq_probe --out "$OUT" --choice /tmp/choice.env > "$OUT/probe.log" 2>&1
echo "probe_rc=$?"
tail -22 "$OUT/probe.log"
if [ -s /tmp/choice.env ]; then . /tmp/choice.env; fi
echo "variant=${COMPRESS_VPTQ_VARIANT:-default} cluster=${COMPRESS_VPTQ_CLUSTER:-default}"
timeout 130 python3 -m compress.bench.kernels --suite vptq --output "$OUT/kernels_vptq" > "$OUT/bench.log" 2>&1
echo "bench_rc=$?"
tail -5 "$OUT/bench.log"
timeout 35 python3 -m pytest tests/test_kernels_vptq.py -q -k cuda -p no:cacheprovider > "$OUT/pytest.log" 2>&1
echo "pytest_rc=$?"
tail -3 "$OUT/pytest.log"
grep -E "median ratio" "$OUT/kernels_vptq/kernels.md"
