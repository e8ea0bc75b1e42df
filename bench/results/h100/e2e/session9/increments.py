"""Where a CUDA-graph decode step's time goes when its kernels overlap (programmatic dependent launch).

Reads a trace written by ab_decode.py (trace_<i>.json.gz: every CUDA kernel of 3 decode-step replays, start and
duration in us) and attributes the step to its kernels by "increment": end of kernel i minus the latest end before it.
Under PDL a kernel starts (and its duration starts counting) while the one before it runs, so durations overlap and
do not add up; the increments do (they sum to the step's span), and each says how much later the step ends because
of that kernel. The W4A16 GEMVs are named by their place in a Llama layer (qkv, o, gate_up, down).

Usage: python3 bench/results/h100/e2e/session9/increments.py TRACE.json.gz [...]
"""

from __future__ import annotations

import collections
import gzip
import json
import sys

GEMVS = ("gemv_qkv", "gemv_o", "gemv_gate_up", "gemv_down")


def increments(path: str, steps: int = 3) -> tuple[float, dict[str, list[float]]]:
    with gzip.open(path, "rt") as f:
        events = sorted((e for e in json.load(f) if not e["name"].startswith("Memcpy") and not e["name"].startswith("Memset")),
                        key=lambda e: e["ts"])
    agg: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])  # count, increment, start - prev end
    seq, prev_end = 0, None
    for e in events:
        name = e["name"][:34]
        if "w4a16_gemv" in e["name"]:
            name, seq = GEMVS[seq % 4], seq + 1
        end = e["ts"] + e["dur"]
        if prev_end is not None:
            a = agg[name]
            a[0] += 1
            a[1] += end - prev_end
            a[2] += e["ts"] - prev_end
        prev_end = end if prev_end is None else max(prev_end, end)
    total = sum(a[1] for a in agg.values()) / steps
    return total, agg


def main() -> None:
    for path in sys.argv[1:]:
        total, agg = increments(path)
        print(f"{path}: {total:.1f} us per step")
        print(f"  {'kernel':36} {'per step':>8} {'us/step':>9} {'us each':>8} {'start - previous end':>21}")
        for name, (n, inc, st) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:10]:
            print(f"  {name:36} {n / 3:8.1f} {inc / 3:9.1f} {inc / n:8.2f} {st / n:21.2f}")


if __name__ == "__main__":
    main()
