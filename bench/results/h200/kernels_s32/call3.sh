set -o pipefail
# Session 32, call 3: ablate (the profile now replays from a fresh prefill).
R=bench/results/h200/kernels_s32/run.sh
ABLATE_LIMIT=300 STAGES="kcache ablate" bash $R 2>&1 | tail -45
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
