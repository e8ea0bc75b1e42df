#!/usr/bin/env bash
# Session 8's closing device call (run tool, kind nvidia-h100-x1), from the repo root:
#   LIMIT=580 bash bench/results/h100/session8_final/run.sh
# The committed defaults of the session's three kernel changes, through the kernel tables themselves:
# VPTQ GPU tests, the seed-000 VPTQ table (rotate), the W8A8 table and the W4A16 table (--quick).
# Every limit counts from the script's start. Results: $OUT/results.tgz (the run tool returns few files).
set -u
LIMIT=${LIMIT:-580}
left() { echo $(( LIMIT - SECONDS - ${1:-0} )); }
export PYTHONUNBUFFERED=1 COMPRESS_KERNEL_CACHE=/tmp/kc
R=/tmp/res; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee $R/gpu.txt
git log --oneline -1 | tee $R/commit.txt
timeout 150 python3 - <<'PY' 2>&1 | tail -2
import time, torch
from concurrent.futures import ThreadPoolExecutor
from kernels import cuda_build, vptq_cluster, vptq_cuda, w4a16_cuda
t = time.time(); dev = torch.device("cuda"); arch = cuda_build.arch(dev)
def w4(nm):
    w, b, s = w4a16_cuda.VARIANTS[nm]
    flags = [f"-DW4_WARPS={w}", f"-DW4_SB={b}", f"-DW4_STAGES={s}"]
    flags += [f"-DW4_RT={w4a16_cuda.ROW_TILES[nm]}"] if nm in w4a16_cuda.ROW_TILES else []
    return cuda_build.compile_library(w4a16_cuda.SRC, nm, flags, arch, "w4a16", "none")
jobs = [lambda br=br: vptq_cluster.compile_pair(arch, *br) for br in [(12, 8), (13, 9), (12, 9), (13, 8)]]
jobs += [lambda nm=nm: vptq_cuda._compile(dev, nm) for nm in ("w16", "w16b")]
jobs += [lambda nm=nm: w4(nm) for nm in sorted(w4a16_cuda.VARIANTS)]
with ThreadPoolExecutor(16) as pool:
    list(pool.map(lambda f: f(), jobs))
print(f"built {len(jobs)} libraries in {time.time() - t:.1f} s")
PY
echo "[$SECONDS s] vptq tests"
timeout $(( $(left) < 60 ? $(left) : 60 )) python3 -m pytest -q -p no:cacheprovider tests/test_s8_vptq_cluster.py \
  tests/test_kernels_vptq.py -k "cuda or cluster or launch or graph or real_shapes or pdl" > $R/pytest_vptq.log 2>&1
echo "pytest_rc=$?"; grep -E "passed|failed" $R/pytest_vptq.log | tail -2; grep -E "^FAILED" $R/pytest_vptq.log | head -5
table() {  # name, seconds reserved after it, args...
  local name=$1 keep=$2; shift 2
  local t=$(left $keep)
  [ "$t" -lt 30 ] && { echo "$name skipped: $(left) s left"; return; }
  echo "[$SECONDS s] $name ($t s)"
  timeout $t python3 -m compress.bench.kernels "$@" --output $R/$name > $R/$name.log 2>&1
  echo "${name}_rc=$?"; grep -hE "median|rows with|->" $R/$name/kernels.md 2>/dev/null | head -12 | cut -c1-250
}
table vptq_rotate 300 --suite vptq --timing rotate
table w8a8 150 --suite w8a8
table w4a16 10 --suite w4a16 --quick
tar czf $OUT/results.tgz -C /tmp res
echo "done in $SECONDS s"
