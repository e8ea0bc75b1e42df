"""Session 2's one measuring call on the H100 (see README.md here): several `compress bench e2e` runs in
one process (compiled kernels and glue are reused), in priority order, each stage skipped when the
time left cannot hold it, each writing its report folder as it goes.

Usage (repository root, on the GPU machine): python bench/results/h100/e2e/session2_run.py OUTDIR BUDGET_S [CKPT_DIR]
Every stage is the function behind `compress bench e2e` with the options of the command printed beside it.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from compress.bench.e2e import canonical_command, run_e2e

out = Path(sys.argv[1])
budget = float(sys.argv[2])
ckpt_dir = Path(sys.argv[3]) if len(sys.argv) > 3 else None
t0 = time.time()

# (folder, needs_s, options): needs_s = the time the stage was estimated to take (not started with less left)
STAGES = [
    ("llama-3-8b", 170, dict(synthetic="llama-3-8b", formats="fp16,w4a16,w8a8", workloads="decode_bound,interactive",
                             runs=3, profile=True)),
    ("qwen3-8b", 60, dict(synthetic="qwen3-8b", formats="w4a16", workloads="decode_bound,interactive", runs=3)),
]
if ckpt_dir is not None and ckpt_dir.is_dir():
    ckpts = sorted(p for p in ckpt_dir.iterdir() if (p / "config.json").is_file())
    STAGES.append(("stories260k", 50, dict(checkpoints=ckpts, workloads="interactive,medium_batch,base,high_concurrency",
                                           runs=3)))
STAGES += [
    ("llama-3-8b_new", 150, dict(synthetic="llama-3-8b", formats="w8a16,w8a8-sparse24,vptq",
                                 workloads="decode_bound,interactive", runs=2)),
    ("llama-3-8b_batch", 80, dict(synthetic="llama-3-8b", formats="sparse24,w8a8-sparse24,fp16",
                                  workloads="medium_batch", runs=2)),
]

summary = []
for folder, needs, opts in STAGES:
    left = budget - (time.time() - t0)
    if left < needs:
        print(f"== {folder}: skipped ({left:.0f} s left, needs ~{needs} s)", flush=True)
        summary.append({"stage": folder, "skipped": f"{left:.0f} s left"})
        continue
    opts = dict(opts)
    ckpts = opts.pop("checkpoints", None)
    cmd = canonical_command(ckpts, opts["workloads"], opts["runs"], opts.get("synthetic"), opts.get("formats"),
                            opts.get("profile", False), Path("out") / folder, "auto", "auto", True, 0)
    print(f"== {folder} ({left:.0f} s left): {cmd}", flush=True)
    s0 = time.time()
    try:
        doc = run_e2e(checkpoints=ckpts, output=out / folder, command=cmd, **opts)
        print(doc["markdown"].split("## Decode bound")[1].split("## Correctness")[0] if "## Decode bound" in doc["markdown"]
              else "", flush=True)
        summary.append({"stage": folder, "seconds": round(time.time() - s0, 1), "command": cmd})
    except Exception as e:  # keep the other stages' measurements
        traceback.print_exc()
        summary.append({"stage": folder, "error": f"{type(e).__name__}: {e}"[:300]})
(out / "stages.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
