# Sourced by the device-call scripts (e2e/session20/run.sh, kernels_s21/run.sh) from the repository root on the GPU
# machine: the repository on the import path, one kernel cache for the call, $OUT (from the device tool) created, and
# the GPU's name, driver and clocks recorded in $OUT/gpu.txt.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
