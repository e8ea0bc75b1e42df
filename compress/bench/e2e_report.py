"""Write the e2e results: seed-002 markdown (summary table per workload, detailed runs, ranking),
the decode-bound table, profiler tables, JSON, and two PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

from compress.bench.e2e_measure import WorkloadResult

MEDALS = ["\N{FIRST PLACE MEDAL}", "\N{SECOND PLACE MEDAL}", "\N{THIRD PLACE MEDAL}"]


def _ms(stats: dict, key: str, digits: int = 2) -> str:
    s = stats.get(key)
    return "n/a" if s is None else f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def _by_workload(results: list[WorkloadResult]) -> dict[str, list[WorkloadResult]]:
    out: dict[str, list[WorkloadResult]] = {}
    for r in results:
        out.setdefault(r.workload, []).append(r)
    return out


def _row_name(r: WorkloadResult) -> str:
    return f"{r.model}_{r.workload}"


def summary_table(rows: list[WorkloadResult]) -> str:
    header = ("| Model | Runs | Latency (s) | Output Throughput (tok/s) | Overall Throughput (tok/s) | Input Throughput (tok/s) "
              "| TTFT (ms) | TPOT (ms) | Peak GPU memory (GB) |")
    lines = [header, "|" + "|".join(["-------"] * 9) + "|"]
    done = sorted((r for r in rows if r.runs), key=lambda r: -r.stats()["output_tps"]["mean"])
    for r in done:
        s = r.stats()
        lines.append(f"| `{_row_name(r)}` | {len(r.runs)} | {_ms(s, 'latency_s')} | {_ms(s, 'output_tps')} | "
                     f"{_ms(s, 'overall_tps')} | {_ms(s, 'input_tps')} | {_ms(s, 'ttft_ms')} | {_ms(s, 'tpot_ms', 3)} | "
                     f"{_ms(s, 'peak_mem_gb')} |")
    for r in rows:
        if not r.runs:
            lines.append(f"| `{_row_name(r)}` | 0 | skipped: {r.skipped} | | | | | | |")
    return "\n".join(lines)


def detailed(r: WorkloadResult) -> str:
    out = [f"#### {_row_name(r)}", "", f"- **Total runs:** {len(r.runs)}",
           f"- **Engine:** {r.engine}, CUDA graphs {r.cuda_graphs}"
           + ("" if r.graph_tokens_match is None else f", graph tokens = eager tokens: {r.graph_tokens_match}"),
           "", "- **Individual runs:**", ""]
    for i, m in enumerate(r.runs, 1):
        out += [f"  - `{_row_name(r)}_run{i}`:", f"    - Latency: {m.latency_s:.2f}s",
                f"    - Output Throughput: {m.output_tps:.2f} tok/s", f"    - Overall Throughput: {m.overall_tps:.2f} tok/s",
                f"    - Input Throughput: {m.input_tps:.2f} tok/s", f"    - TTFT: {m.ttft_ms:.2f} ms",
                f"    - TPOT: {m.tpot_ms:.3f} ms"]
    s = r.stats()
    out += ["- **Statistics:**", "", f"  - Latency: {_ms(s, 'latency_s')}", f"  - Output Throughput: {_ms(s, 'output_tps')}",
            f"  - Overall Throughput: {_ms(s, 'overall_tps')}", f"  - TTFT (ms): {_ms(s, 'ttft_ms')}",
            f"  - TPOT (ms): {_ms(s, 'tpot_ms', 3)}", ""]
    return "\n".join(out)


def ranking(groups: dict[str, list[WorkloadResult]]) -> str:
    out = ["## Performance Ranking (by Output Throughput)", ""]
    for rows in groups.values():
        done = sorted((r for r in rows if r.runs), key=lambda r: -r.stats()["output_tps"]["mean"])
        if not done:
            continue
        r0 = done[0]
        out += [f"### Configuration: batch_size={r0.batch}, input_len={r0.input_len}, output_len={r0.output_len}", ""]
        for i, r in enumerate(done):
            mark = MEDALS[i] if i < 3 else f"{i + 1}."
            out.append(f"{mark} **{_row_name(r)}**: {r.stats()['output_tps']['mean']:.2f} tok/s")
        out.append("")
    return "\n".join(out)


def bound_table(models: list[dict], results: list[WorkloadResult]) -> str:
    """Per model: weight bytes, bound = bytes / copy BW, measured batch-1 TPOT and its ratio to the bound."""
    lines = ["## Decode bound (batch 1)", "",
             "bound = weight bytes read per decode step / measured copy bandwidth (read + write counted); "
             "TPOT from the batch-1 workload with the longest output (decode_bound when run).", "",
             "| Model | Formats (layers) | Weight bytes (GB) | Copy BW (GB/s) | Bound (ms) | TPOT (ms) | TPOT / bound |",
             "|---|---|---|---|---|---|---|"]
    for m in models:
        if m.get("error") and not m.get("weight_bytes"):
            lines.append(f"| `{m['label']}` | failed: {m['error']} | | | | | |")
            continue
        b1 = [r for r in results if r.model == m["label"] and r.batch == 1 and r.runs]
        best = max(b1, key=lambda r: (r.output_len, -r.input_len), default=None)
        tpot = best.stats()["tpot_ms"]["mean"] if best else None
        bound = m.get("bound_ms")
        ratio = f"{tpot / bound:.2f}x" if tpot and bound else "n/a"
        fmts = ", ".join(f"{k} ({n})" for k, n in m["formats"].items()) or "dense"
        lines.append(f"| `{m['label']}` | {fmts} | {m['weight_bytes'] / 1e9:.3f} | {m['copy_bw_gbs']:.0f} | "
                     f"{'n/a' if bound is None else f'{bound:.3f}'} | {'n/a' if tpot is None else f'{tpot:.3f}'} | {ratio} |")
    return "\n".join(lines)


def checks_table(models: list[dict], results: list[WorkloadResult]) -> str:
    lines = ["## Correctness checks", "",
             "Relative L2 errors. Per layer: every compressed Linear of decoder layer 0 on the same random "
             "activations, kernel vs plain-torch reference (stated tolerance 5e-3 with fp16/bf16 activations: both "
             "accumulate in fp32, in another order). Logits: last position of one 16-token prompt, transformers' "
             "forward with our kernels vs the same forward on the references, and the fast engine vs transformers' "
             "forward (stated tolerance 1e-2 for weight-only formats; with dynamic activation quantization a "
             "rounding tie that flips in one layer propagates through a deep random-weight network, so there the "
             "per-layer figure is the test). Graph replay: greedy tokens of the CUDA-graph run equal those of the "
             "eager run (first 16 tokens of each workload).", "",
             "| Model | layer kernel vs reference, M=1 / M=16 (worst per path, M=1 and 16) | logits kernel vs reference | argmax agrees "
             "| fast engine vs transformers | graph tokens = eager |",
             "|---|---|---|---|---|---|"]
    for m in models:
        c = m.get("checks")
        if not c:
            lines.append(f"| `{m['label']}` | {'failed: ' + m['error'] if m.get('error') else 'n/a'} | | | | |")
            continue
        flags = [r.graph_tokens_match for r in results if r.model == m["label"] and r.graph_tokens_match is not None]
        graph = "n/a (no graphs)" if not flags else f"{sum(flags)}/{len(flags)} workloads"
        fast = c.get("fast_vs_transformers")
        layer = c.get("layer_kernel_vs_reference") or {}
        layer_s = " / ".join(f"{v:.1e}" for k, v in layer.items() if k.startswith("M=")) if layer else "n/a (dense)"
        if layer.get("paths"):
            layer_s += " (" + ", ".join(f"{k} {v:.1e}" for k, v in layer["paths"].items()) + ")"
        lines.append(f"| `{m['label']}` | {layer_s} | {c['kernel_vs_reference']:.2e} | {c.get('argmax_agree')} | "
                     f"{'n/a' if fast is None else f'{fast:.2e}'} | {graph} |")
    return "\n".join(lines)


def paths_table(models: list[dict]) -> str:
    """Per model: the path the runtime measured fastest for each (layer kind, N, K, M), with the times."""
    lines = ["## Paths chosen per layer shape and M (compress.runtime.paths)", "",
             "Each candidate timed on single calls after overwriting L2 (median, microseconds); the fastest runs, or a "
             "preferred path within its tolerance of the fastest (compress.runtime.paths.PREFER_BY_GPU).", "",
             "| Model | layer | N x K | M | chosen | candidates (us) |", "|---|---|---|---|---|---|"]
    n = 0
    for m in models:
        for p in m.get("paths") or []:
            cands = ", ".join(f"{k} {v}" for k, v in p["us"].items())
            lines.append(f"| `{m['label']}` | {p['layer']} | {p['N']} x {p['K']} | {p['M']} | {p['chosen']} | {cands} |")
            n += 1
    return "\n".join(lines) if n else ""


def tuned_table(results: list[WorkloadResult]) -> str:
    """--tune-paths: per workload, each decode-step key whose paths were timed inside the step, and what it kept."""
    rows = [(r, t) for r in results for t in r.tuned]
    if not rows:
        return ""
    lines = ["## Paths tuned inside the decode step (--tune-paths, compress.runtime.graph_tune)", "",
             "Each candidate served in turn, the other layer shapes as they were; TPOT of a whole generation with the "
             "graphs re-captured (ms). The fastest is kept and the timed runs above use it. A second pass runs where "
             "the first changed a choice (\"before\": the single-call pick in pass 1, the first pass's choice in pass 2).",
             "", "| Model | workload | pass | layer | N x K | M | before | kept | TPOT per candidate (ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r, t in rows:
        k = t["key"]
        tp = ", ".join(f"{n} {v:.3f}" for n, v in t["tpot_ms"].items())
        lines.append(f"| `{r.model}` | {r.workload} | {t.get('pass', 1)} | {k[0]} | {k[1]} x {k[2]} | {k[3]} | "
                     f"{t['before']} | {t['chosen']} | {tp} |")
    return "\n".join(lines)


def markdown(meta: dict, models: list[dict], results: list[WorkloadResult], profiles: list[dict]) -> str:
    out = ["# Performance Benchmark Results", "", f"**Command:** `{meta['command']}`", "",
           f"**Device:** {meta['device']} · torch {meta['torch']} · transformers {meta['transformers']}"
           + (f" · triton {meta['triton']}" if meta.get("triton") else ""), ""]
    if meta.get("synthetic"):
        out += [f"**Weights are synthetic:** {meta['synthetic']}", ""]
    out += [f"**Method:** {meta['method']}", "", "---", ""]
    groups = _by_workload(results)
    for rows in groups.values():
        r0 = rows[0]
        out += [f"## Configuration: batch_size={r0.batch}, input_len={r0.input_len}, output_len={r0.output_len}", "",
                f"**Total models tested:** {len(rows)}", "", "### Summary Table", "", summary_table(rows), "",
                "### Detailed Results", ""]
        out += [detailed(r) for r in rows if r.runs]
    out += ["---", "", ranking(groups), bound_table(models, results), "", checks_table(models, results), "",
            paths_table(models), "", tuned_table(results), ""]
    for p in profiles:
        out += [f"## Profile: `{p['model']}`, one prefill and one decode step of {p['workload']} "
                f"({p['engine']} engine, eager, {p['device']})", ""]
        for step in ("prefill", "decode"):
            out += [f"### {step}", "", "```", p[step]["table"].rstrip(), "```", ""]
    return "\n".join(out)


def plots(results: list[WorkloadResult], folder: Path) -> list[str]:
    """throughput per workload per model (bars) and TPOT vs batch (lines); returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in results if r.runs]
    if not done:
        return []
    models = list(dict.fromkeys(r.model for r in done))
    workloads = list(dict.fromkeys(r.workload for r in done))
    files = []

    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(workloads)), 5))
    width = 0.8 / len(models)
    for i, m in enumerate(models):
        xs, ys, es = [], [], []
        for j, w in enumerate(workloads):
            r = next((r for r in done if r.model == m and r.workload == w), None)
            if r:
                s = r.stats()["output_tps"]
                xs.append(j + (i - (len(models) - 1) / 2) * width)
                ys.append(s["mean"])
                es.append(s["std"])
        ax.bar(xs, ys, width, yerr=es, label=m)
    ax.set_xticks(range(len(workloads)), workloads, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("output throughput (tok/s, log)")
    ax.set_title("Output throughput per workload")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "e2e_throughput.png", dpi=120)
    plt.close(fig)
    files.append("e2e_throughput.png")

    fig, ax = plt.subplots(figsize=(7, 5))
    for m in models:
        pts = {}
        for r in (r for r in done if r.model == m and r.output_len > 1):
            # One point per batch size: prefer the 256-token prompt (the seed's batched workloads use it).
            if r.batch not in pts or (r.input_len == 256 and pts[r.batch][1] != 256):
                pts[r.batch] = (r.stats()["tpot_ms"]["mean"], r.input_len)
        if pts:
            bs = sorted(pts)
            ax.plot(bs, [pts[b][0] for b in bs], marker="o", label=m)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("TPOT (ms)")
    ax.set_title("Time per output token vs batch")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "e2e_tpot_vs_batch.png", dpi=120)
    plt.close(fig)
    files.append("e2e_tpot_vs_batch.png")
    return files


def write(folder: Path, meta: dict, models: list[dict], results: list[WorkloadResult], profiles: list[dict]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "models": models, "results": [r.to_json() for r in results], "profiles": profiles}
    (folder / "e2e.json").write_text(json.dumps(doc, indent=2) + "\n")
    (folder / "e2e.md").write_text(markdown(meta, models, results, profiles))
    files = ["e2e.md", "e2e.json", *plots(results, folder)]
    return {"folder": str(folder), "files": files}


def load_results(doc: dict) -> list[WorkloadResult]:
    from compress.bench.e2e_measure import RunMetrics

    out = []
    for r in doc["results"]:
        fields = {k: v for k, v in r.items() if k not in ("stats", "runs")}
        out.append(WorkloadResult(**fields, runs=[RunMetrics(**m) for m in r["runs"]]))
    return out


def merge(paths: list[Path], folder: Path) -> dict:
    """One report from several e2e.json of the same device (e.g. formats measured in separate calls).
    A model measured twice keeps its later measurement; each model keeps the copy bandwidth of its run."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    devices = {d["meta"]["device"] for d in docs}
    if len(devices) != 1:
        raise ValueError(f"cannot merge runs from different devices: {sorted(devices)}")
    models: dict[str, dict] = {}
    results: dict[tuple[str, str], WorkloadResult] = {}
    profiles: dict[str, dict] = {}
    for d in docs:
        for m in d["models"]:
            models.pop(m["label"], None)
            models[m["label"]] = m
            for key in [k for k in results if k[0] == m["label"]]:
                del results[key]
        for r in load_results(d):
            results[(r.model, r.workload)] = r
        for p in d.get("profiles", []):
            profiles[p["model"]] = p
    meta = dict(docs[-1]["meta"])
    meta["command"] = "` + `".join(d["meta"]["command"] for d in docs)
    meta["copy_bw_gbs"] = [d["meta"]["copy_bw_gbs"] for d in docs]
    order = {w: i for i, w in enumerate(dict.fromkeys(r.workload for r in results.values()))}
    ordered = sorted(results.values(), key=lambda r: order[r.workload])
    return write(folder, meta, list(models.values()), ordered, list(profiles.values()))


if __name__ == "__main__":  # python -m compress.bench.e2e_report OUT_DIR A/e2e.json B/e2e.json ...
    import sys

    args = sys.argv[1:]
    if len(args) < 2 or any(a.startswith("-") for a in args) or not all(Path(a).is_file() for a in args[1:]):
        sys.exit("usage: python -m compress.bench.e2e_report OUT_DIR A/e2e.json [B/e2e.json ...]: writes one "
                 "e2e.md / e2e.json / plots in OUT_DIR from the e2e.json files of `compress bench e2e` runs on one device")
    try:
        print(merge([Path(a) for a in args[1:]], Path(args[0])))
    except ValueError as exc:
        sys.exit(f"error: {exc}")
