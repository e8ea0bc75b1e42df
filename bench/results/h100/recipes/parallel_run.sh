#!/usr/bin/env bash
# Session-4 driver on the lent GPU machine: set up once (wheels, the SmolLM2 GGUF from its two halves, a bf16
# HF folder), run fp8_dynamic alone (its wall ratio is the close one), then several recipes_vs_oneshot
# processes side by side on the one GPU (a 135M model leaves the H100 and its 16 cores mostly idle).
# Wall times of the side-by-side rows were taken under that contention, by both arms alike.
# Usage: bash bench/results/h100/recipes/parallel_run.sh OUT_DIR "FP8_SEEDS" "GROUP1" "GROUP2" ...
#   GROUPk = "recipe[,recipe...] seed [seed...]"   e.g. "w4a16_awq,w8a16_awq 0"
set -euo pipefail
out=$1; fp8_seeds=$2; shift 2
mkdir -p "$out"
source bench/results/h100/recipes/smollm2_setup.sh
sha256sum $gguf | tee "$out/gguf.sha256"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
git rev-parse HEAD > "$out/commit.txt" 2>/dev/null || true
if [ -n "$fp8_seeds" ]; then
  python3 bench/recipes_vs_oneshot.py --model /tmp/smol-hf --out "$out/fp8_alone" --recipes fp8_dynamic --seeds $fp8_seeds \
    > "$out/fp8_alone.log" 2>&1 || echo "fp8 run failed: see fp8_alone.log"
fi
i=0
for group in "$@"; do
  i=$((i + 1))
  recipes=${group%% *}; seeds=${group#* }
  python3 bench/recipes_vs_oneshot.py --model /tmp/smol-hf --out "$out/group$i" --recipes ${recipes//,/ } --seeds $seeds \
    > "$out/group$i.log" 2>&1 &
done
wait || true
for f in "$out"/*/recipes.md; do echo "== $f"; tail -n +3 "$f"; done
