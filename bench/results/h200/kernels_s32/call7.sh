set -o pipefail
# Session 32, call 7: the path table's preference for the warp-specialized one-token GEMV (compress.runtime.paths,
# default cuda_ws_gemv:0.10) against no preference, same process; then `compress bench e2e` decode_bound as shipped.
R=bench/results/h200/kernels_s32/run.sh
ABLATE_PROFILE_ARM=base ABLATE_ARMS="base prefer: base prefer:" ABLATE_LIMIT=150 STAGES="kcache ablate" bash $R 2>&1 | tail -6
E2E_TAG=_db E2E_LIMIT=100 STAGES="e2e pack" bash $R 2>&1 | tail -3
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
