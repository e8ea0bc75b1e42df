#!/bin/bash
# Session 16 device call (repository root, kind nvidia-h100-x1), OUT=$OUT, LIMIT seconds in all; stages in STAGES:
#   sp24   kernels_s15/sp24_i8_sweep.py: the 2:4 int8 one-token GEMVs (served, the SP_VARIANTS configs; default
#          iw_variants.json, the meta-word PRMT GEMV `_sparse24_gemv_iw_kernel`) against the dense W8A8 paths
#   iw     iw_sweep.py: variants (IW_VARIANTS, default iw_variants5.json) over the served one-token 2:4 int8 GEMV of
#          each shape, against the dense W8A8 one-token paths
#   w8a8   kernels_s13/w8a8_sweep.py: the W8A8 kernel's served config at W8_MS (default 4,8,16) tokens against the
#          W8_VARIANTS configs merged over it (default gemvw_variants.json: the few-token GEMV `_gemv_words_kernel`),
#          on the 8 Llama-3 shapes (W8_SHAPES)
#   e2e    `compress bench e2e --synthetic llama-3-8b` at batch 1 (E2E_WORKLOADS, default interactive,decode_bound):
#          W8A8 and 2:4 W8A8 on this tree, then 2:4 W8A8 with session 15's one-token GEMV put back through
#          COMPRESS_KERNEL_CONFIGS (s15_int8_gemv.json), then this tree again; E2E_ARMS / S15_CONFIGS choose
#          other arms (name:formats, "s15" arms with the S15_CONFIGS file, e.g. s15_gemvs.json for fp16 and int8)
#   tests  pytest argument sets in TEST_SETS (';' between them)
#   table  `compress bench kernels $TABLE_ARGS` (default --suite sparse24) on the tree as it is
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COMPRESS_KERNEL_CACHE="${COMPRESS_KERNEL_CACHE:-/tmp/compress_kernels}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
LIMIT=${LIMIT:-580}
DIR=bench/results/h100/kernels_s16
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv 2>&1 | tee -a "$LOG"
for s in ${STAGES:-sp24}; do
  echo "== [$SECONDS s] $s" | tee -a "$LOG"
  case $s in
    sp24)
      SP_VARIANTS="${SP_VARIANTS:-$(cat $DIR/iw_variants.json)}" timeout $(left ${SP_REST:-5}) \
        python3 bench/results/h100/kernels_s15/sp24_i8_sweep.py "$OUT" 2>&1 | tee -a "$LOG" | cut -c1-900 ;;
    iw)
      IW_VARIANTS="${IW_VARIANTS:-$(cat $DIR/iw_variants5.json)}" timeout $(left ${IW_REST:-5}) \
        python3 $DIR/iw_sweep.py "$OUT/iw" 2>&1 | tee -a "$LOG" | cut -c1-600 ;;
    w8a8)
      W8_SHAPES="${W8_SHAPES:-4096x4096,1024x4096,14336x4096,4096x14336,8192x8192,1024x8192,28672x8192,8192x28672}" \
      W8_VARIANTS="${W8_VARIANTS:-$(cat $DIR/gemvw_variants.json)}" timeout $(left ${W8_REST:-5}) \
        python3 bench/results/h100/kernels_s13/w8a8_sweep.py "$OUT/w8a8" 2>&1 | tee -a "$LOG" | cut -c1-600 ;;
    e2e)
      W=${E2E_WORKLOADS:-interactive,decode_bound}
      for arm in ${E2E_ARMS:-new:w8a8,w8a8-sparse24 s15:w8a8-sparse24 new2:w8a8-sparse24}; do
        name=${arm%%:*}; fmts=${arm#*:}
        echo "-- e2e $name ($fmts)" | tee -a "$LOG"
        env $([ $name = s15 ] && echo COMPRESS_KERNEL_CONFIGS=$DIR/${S15_CONFIGS:-s15_int8_gemv.json}) timeout $(left ${E2E_REST:-5}) \
          python3 -m compress.bench.e2e --synthetic llama-3-8b --formats $fmts --workloads $W --runs 3 \
          --output "$OUT/e2e_$name" 2>&1 | tee -a "$LOG" | grep --line-buffered -E "TPOT|Error|error" | cut -c1-200
      done ;;
    tests)
      IFS=';' read -ra SETS <<< "$TEST_SETS"
      for t in "${SETS[@]}"; do
        echo "-- pytest $t" | tee -a "$LOG"
        timeout $(left ${TEST_REST:-5}) python3 -m pytest $t -q -p no:cacheprovider 2>&1 | tee -a "$LOG" \
          | grep --line-buffered -E "passed|failed|Error|^FAILED" | cut -c1-300 | tail -8
      done ;;
    table)
      timeout $(left 3) python3 -m compress.bench.kernels ${TABLE_ARGS:---suite sparse24} --output "$OUT/kernels" 2>&1 \
        | tee -a "$LOG" | grep --line-buffered -E "median|Error|error|->|rows in" | cut -c1-300 | tail -12 ;;
  esac
done
echo "== [$SECONDS s] done" | tee -a "$LOG"
