"""Session 2's one measuring call on the H100 (see README.md here): several `compress bench e2e` runs in
one process (compiled kernels and glue are reused), in priority order, each stage skipped when the
time left cannot hold it, each writing its report folder as it goes.

Usage (repository root, on the GPU machine): python bench/results/h100/e2e/session2_run.py OUTDIR BUDGET_S [CKPT_DIR [SNAPSHOT]]
Every stage is the function behind `compress bench e2e` with the options of the command printed beside it.
SNAPSHOT: a .tgz of OUTDIR rewritten every 20 s and at the end, so that a run stopped at the device's time
limit still returns what it measured (report folders are written after every model).
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
import threading
import time
import traceback
from pathlib import Path

from compress.bench.e2e import canonical_command, run_e2e

out = Path(sys.argv[1])
budget = float(sys.argv[2])
ckpt_dir = Path(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else None
snapshot = Path(sys.argv[4]) if len(sys.argv) > 4 else None
t0 = time.time()
out.mkdir(parents=True, exist_ok=True)
_lock = threading.Lock()


def take_snapshot() -> None:
    if snapshot is None:
        return
    with _lock:
        tmp = snapshot.with_name(snapshot.name + ".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(out, arcname=out.name)
        os.replace(tmp, snapshot)


def _snapshots() -> None:
    while True:
        time.sleep(20)
        try:
            take_snapshot()
        except Exception as e:  # never let the snapshot thread stop the measurements
            print(f"snapshot failed: {e}", flush=True)


threading.Thread(target=_snapshots, daemon=True).start()

# (folder, needs_s, options): needs_s = the time the stage was estimated to take (not started with less left)
short = budget < 330  # little device time: the targets only, 2 runs each
STAGES = [
    ("llama-3-8b", 150 if short else 200,
     dict(synthetic="llama-3-8b", formats="fp16,w4a16,w8a8", runs=2 if short else 3, profile=True,
          workloads="decode_bound,interactive" if short else "decode_bound,interactive,medium_batch")),
    ("qwen3-8b", 45, dict(synthetic="qwen3-8b", formats="w4a16", workloads="decode_bound", runs=2 if short else 3)),
]
if ckpt_dir is not None and ckpt_dir.is_dir():
    ckpts = sorted(p for p in ckpt_dir.iterdir() if (p / "config.json").is_file())
    STAGES.append(("stories260k", 60, dict(checkpoints=ckpts, workloads="interactive,medium_batch", runs=2)))
# Formats not measured on the GPU before (batch 1 from the 64-token interactive workload) and 2:4's batched decode.
STAGES.append(("llama-3-8b_more", 110, dict(synthetic="llama-3-8b", formats="w8a16,sparse24,w8a8-sparse24,vptq",
                                             workloads="interactive,medium_batch", runs=2)))

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
        rows = []
        for r in doc["results"]:
            st = r.get("stats") or {}
            if st:
                rows.append(f"RESULT {r['model']:34s} {r['workload']:13s} TTFT {st['ttft_ms']['mean']:8.2f} ms  "
                            f"TPOT {st['tpot_ms']['mean']:7.3f} ms  {st['output_tps']['mean']:9.1f} tok/s")
        for m in doc["models"]:
            rows.append(f"RESULT {m['label']:34s} bound {m.get('bound_ms') or 0:.3f} ms  weights {m.get('weight_bytes', 0) / 1e9:.3f} GB"
                        + (f"  ERROR {m['error']}" if m.get("error") else ""))
        print("\n".join(rows), flush=True)
        summary.append({"stage": folder, "seconds": round(time.time() - s0, 1), "command": cmd, "rows": rows})
    except Exception as e:  # keep the other stages' measurements
        traceback.print_exc()
        summary.append({"stage": folder, "error": f"{type(e).__name__}: {e}"[:300]})
(out / "stages.json").write_text(json.dumps(summary, indent=1))
take_snapshot()
for st in summary:
    print(f"STAGE {st['stage']}: " + ", ".join(f"{k}={v}" for k, v in st.items() if k not in ("stage", "rows", "command")))
    for row in st.get("rows", []):
        print(row)
