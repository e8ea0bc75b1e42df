set -o pipefail
# Session 39, call 2: host time of an eager decode step (eager_profile.py: fp16, W4A16, W8A8 synthetic Llama-3-8B,
# the fast engine without CUDA graphs): step wall time, then cProfile's top functions.
touch /tmp/call_start  # pack only what this call writes under $OUT
STAGES="kcache" bash bench/results/h200/kernels_s37/run.sh 2>&1 | tail -1
. bench/results/h100/device_env.sh > /dev/null
PROFILE_FORMATS=fp16,w4a16,w8a8 timeout 400 python3 bench/results/h200/kernels_s39/eager_profile.py $OUT/eager_profile.json 2>&1 \
  | grep -v -E "warn|^ *$" > $OUT/eager_profile.log
grep "==" $OUT/eager_profile.log
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/eager_profile.json"))
for f, r in d["formats"].items():
    lines = r["tottime"].splitlines()
    i = next(i for i, l in enumerate(lines) if "ncalls" in l)
    print("==", f, r["step_ms"]); print("\n".join(l[:160] for l in lines[i:i + 26]))
PY
echo "done at $SECONDS s"
cd $OUT && tar czf results.tgz --remove-files $(find . -maxdepth 1 -newer /tmp/call_start -not -name gpu.txt -not -name . -printf '%P\n') && ls
