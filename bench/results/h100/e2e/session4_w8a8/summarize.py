"""Markdown tables from a device call's ab_e2e.json / gemv_bench.json (session 4, W8A8 decode).

Usage: python bench/results/h100/e2e/session4_w8a8/summarize.py DIR   (the folder the call's $OUT came back to)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def ab_table(doc: dict) -> list[str]:
    out = [f"Copy bandwidth {doc['copy_bw_gbs']:.0f} GB/s, {doc['weight_bytes'] / 1e9:.3f} GB per step -> bound "
           f"{doc['bound_ms']:.3f} ms; {doc['runs']} timed runs per variant.", "",
           "| variant | TPOT (ms) | TPOT / bound | graph tokens = eager | 64 tokens = first variant's | "
           "_gemv_i8 (us, calls) | _add_rms_norm | _attn_split | _attn_combine | _gemv (lm_head) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in doc["variants"].items():
        if "error" in v:
            out.append(f"| {name} | failed: {v['error'][:80]} | | | | | | | | |")
            continue
        top = {}
        for t in v["decode_top"]:
            key = t["name"].replace("_pdl", "")
            if key not in top:
                top[key] = t
        cells = []
        for k in ("_gemv_i8", "_add_rms_norm", "_attn_split", "_attn_combine", "_gemv"):
            t = top.get(k)
            cells.append(f"{t['self_us']:.0f} (x{t['calls']})" if t else "")
        out.append(f"| {name} | {v['tpot_ms']['mean']:.3f} ± {v['tpot_ms']['std']:.3f} | {v['tpot_over_bound']:.3f}x | "
                   f"{v['graph_tokens_match']} | {v['tokens_equal_first_variant']} | " + " | ".join(cells) + " |")
    return out


def bench_tables(doc: dict) -> list[str]:
    out = ["| shape | variant | us per call | GB/s | equal to before |", "|---|---|---|---|---|"]
    for shape, row in doc.get("sweep", {}).items():
        for label, v in row.items():
            if "error" in v:
                out.append(f"| {shape} | {label} | failed | | |")
            else:
                out.append(f"| {shape} | {label} | {v['us']} | {v['gbs']:.0f} | {v.get('equal_to_before', '')} |")
    out += ["", "| layer sequence (no attention) | us per layer | x 32 layers (ms) | output equal |", "|---|---|---|---|"]
    for label, v in doc.get("layer", {}).items():
        if "error" in v:
            out.append(f"| {label} | failed: {v['error'][:80]} | | |")
        else:
            out.append(f"| {label} | {v['us_per_layer']} | {v['us_per_layer'] * 32 / 1e3:.3f} | {v['equal_to_first']} |")
    out += ["", "| norm (64 per graph) | us per call |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in doc.get("norm", {}).items()]
    if "fp16_gemv" in doc:
        out += ["", "| fp16 GEMV shape | variant | us | GB/s | equal |", "|---|---|---|---|---|"]
        for shape, row in doc["fp16_gemv"].items():
            for label, v in row.items():
                if "error" not in v:
                    out.append(f"| {shape} | {label} | {v['us']} | {v['gbs']:.0f} | {v['equal_to_first']} |")
    return out


def main() -> None:
    d = Path(sys.argv[1])
    lines = []
    if (d / "ab_e2e.json").is_file():
        lines += ["## Before vs now, one process (ab_e2e.py)", ""] + ab_table(json.loads((d / "ab_e2e.json").read_text()))
    if (d / "gemv_bench.json").is_file():
        lines += ["", "## Graph-replay microbenchmarks (gemv_bench.py)", ""]
        lines += bench_tables(json.loads((d / "gemv_bench.json").read_text()))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
