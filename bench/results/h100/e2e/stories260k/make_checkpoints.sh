# Writes the real stories260K checkpoints for the session-2 e2e run (CPU; out/ is git-ignored: carry out/e2e_stories to the GPU machine).
cd "$(dirname "$0")/../../../../.."  # the repository root
S=../shared/assets/models/stories260K
SMALL="--num-samples 8 --seq-len 128 --eval-dataset tinystories --eval-seq-len 256 --max-windows 4"
for r in original w4a16_gptq w8a8_smooth_gptq w8a16_awq fp8_dynamic; do
  /usr/bin/time -f "$r %e s" python -m compress.cli run $r --model $S --output out/e2e_stories/$r --device cpu --skip-unfit-layers $SMALL > out/e2e_stories/$r.log 2>&1
  echo "$r rc=$?"
done
python -m compress.cli run w8a8_sparse_smooth_gptq --model $S --output out/e2e_stories/w8a8_sparse_smooth_gptq --device cpu --skip-unfit-layers --pack sparse24 $SMALL > out/e2e_stories/w8a8_sparse.log 2>&1; echo "sparse rc=$?"
python -m compress.cli run vptq_v8_k4096_r256 --model $S --output out/e2e_stories/vptq_v8_k4096_r256 --device cpu --skip-unfit-layers $SMALL > out/e2e_stories/vptq.log 2>&1; echo "vptq rc=$?"
