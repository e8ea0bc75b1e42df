set -o pipefail
# Session 32, call 6 (main after the two experiments went to a branch): which family of one-token int4 GEMVs makes the
# fastest decode step inside the CUDA graph (COMPRESS_PATH_FORCE arms, each arm re-measuring its path table).
R=bench/results/h200/kernels_s32/run.sh
ABLATE_PROFILE_ARM=base ABLATE_ARMS="base force:cuda_gemv force:cuda_cc_gemv force:cuda_ws_gemv base force:cuda_gemv force:cuda_ws_gemv force:cuda_cc_gemv" \
  ABLATE_LIMIT=260 STAGES="kcache ablate" bash $R 2>&1 | tail -12
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
