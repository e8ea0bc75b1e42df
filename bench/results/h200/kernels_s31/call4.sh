set -o pipefail
R=bench/results/h200/kernels_s31/run.sh
STAGES="kcache wsmbuild tests" TESTS="tests/test_w4a16_ws_gemm.py::test_runtime_offers_the_path_at_2_to_16_tokens_only tests/test_w4a16_cuda.py::test_runtime_offers_and_measures_the_cuda_path tests/test_w4a16_ws_gemm.py::test_cuda_graph_replay_and_leading_dims" TEST_LIMIT=60 bash $R 2>&1 | tail -4
WSM_M=1 WSM_CONFIGS="3 0 6" WSM_LIMIT=60 STAGES="wsm" bash $R 2>&1 | grep -v "^    " | tail -12
TABLE_LIMIT=330 STAGES="table" bash $R 2>&1 | tail -16
for w in 1 0; do COMPRESS_W4A16_WS_GEMM=$w E2E_TAG=_mb_wsm$w E2E_WORKLOADS=medium_batch E2E_LIMIT=120 STAGES="e2e" bash $R 2>&1 | grep "TPOT" | head -2; done
E2E_TAG=_db E2E_LIMIT=150 STAGES="e2e" bash $R 2>&1 | grep "TPOT" | head -3
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
