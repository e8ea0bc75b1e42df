#!/usr/bin/env bash
# The A/B benchmarks compare today's kernels with earlier ones in one process on the GPU machine, which has no git.
# The earlier sources are not kept as copies in the tree: this writes them from git history (git-ignored paths).
# Run it in a checkout before such a device call, and pass the written paths in `carry`.
# Usage (repository root): bash bench/results/baselines.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
w8=bench/results/h100/e2e/session4_w8a8
write() {  # commit, path in that commit, destination
  git show "$1:$2" > "$3"
  echo "$3 <- $1:$2"
}
write 3bcf560 compress/runtime/decode_kernels.py "$w8/decode_kernels_before.py"          # session 3's decode kernels
write 9e005df compress/runtime/decode_kernels.py "$w8/decode_kernels_call1.py"           # W8A8 device call 1's
write fd9a0b8 compress/runtime/decode_kernels.py "$w8/decode_kernels_call2_rejected.py"  # call 2's rejected loop
write 4f538cc kernels/csrc/w4a16_gemv.cu bench/results/h100/kernels/w4a16_cuda_s4_old.cu  # session 3's int4 GEMV
