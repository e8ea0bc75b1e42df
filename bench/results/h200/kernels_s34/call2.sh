set -o pipefail
# Session 34, call 2: the W8A8 GEMM's tiles at 8 and 16 tokens re-swept on the H200 (the H100's session 8/13 config,
# `_config_s8`, against variants), all 8 Llama-3 shapes; W4A16 decode on the 8B shapes without the WS GEMV's H200
# table (the configs' search, e2e_no_table.py).
R=bench/results/h200/kernels_s34/run.sh
STAGES="kcache" bash $R 2>&1 | tail -1
export W8_MS=8,16 W8_SHAPES=4096x4096,1024x4096,14336x4096,4096x14336,8192x8192,1024x8192,28672x8192,8192x28672
export W8_VARIANTS='{"deep4": {"deep": 4}, "deep8": {"deep": 8}, "deep10": {"deep": 10}, "bn32": {"BN": 32},
 "bn128": {"BN": 128, "deep": 4}, "bn128w8": {"BN": 128, "num_warps": 8, "deep": 4}, "fit2": {"fit": 2},
 "pf8k": {"pdl": 8192}, "w8": {"num_warps": 8}, "bk128d10": {"BK": 128, "deep": 10}, "bk512": {"BK": 512, "deep": 4}}'
W8_LIMIT=330 STAGES="w8" bash $R 2>&1 | tail -20
E2E_LIMIT=150 STAGES="notable" bash $R 2>&1 | grep -E "search|TPOT [0-9]|done" | cut -c1-300
cd $OUT && tar czf results.tgz --remove-files $(ls | grep -v gpu.txt) && ls
