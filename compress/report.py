"""The run report: report.json (everything, machine-readable) and report.md (for people), written
into the checkpoint folder; and the summary table printed at the end of a run."""
from __future__ import annotations

import json
import platform
from pathlib import Path

import torch


def versions() -> dict:
    import compressed_tensors
    import llmcompressor
    import transformers

    from compress import __version__

    out = {
        "compress": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "llmcompressor": llmcompressor.__version__,
        "compressed_tensors": compressed_tensors.__version__,
        "machine": platform.machine(),
        "cpu_count": __import__("os").cpu_count(),
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def summary_row(r: dict) -> dict[str, str]:
    return {
        "recipe": r["recipe"],
        "size before": human_bytes(r["size_before_bytes"]),
        "size after": human_bytes(r["size_after_bytes"]),
        "ratio": f"{r['compression_ratio']:.2f}x",
        "bits/weight": f"{r['bits_per_weight']:.2f}",
        "PPL before": f"{r['ppl_before']['ppl']:.3f}",
        "PPL after": f"{r['ppl_after']['ppl']:.3f}",
        "change": f"{r['ppl_change_percent']:+.2f}%",
        "wall time": f"{r['wall_time_s']:.1f} s",
        "peak memory": f"{r['peak_memory'].get('gpu_allocated_mib', r['peak_memory']['cpu_rss_mib']):.0f} MiB"
        + (" GPU" if "gpu_allocated_mib" in r["peak_memory"] else " RSS"),
    }


def markdown_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_report(folder: Path, report: dict) -> None:
    report["versions"] = versions()
    (Path(folder) / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    b, a = report["ppl_before"], report["ppl_after"]
    cal = report.get("calibration")
    lines = [
        f"# compress report: {report['recipe']}",
        "",
        markdown_table([summary_row(report)]),
        "",
        f"- model: `{report['model']}`; device: {report['device']}; seed: {report['seed']}",
        f"- gate: max PPL increase {report['gate_max_ppl_increase_percent']}% -> "
        + ("passed" if report["gate_passed"] else "FAILED"),
        f"- perplexity protocol: {a['protocol']}; dataset {a['dataset']} ({a['source']}, sha256 {a['sha256'][:16]}), "
        f"seq-len {a['seq_len']}, {a['windows']} windows, {a['tokens_scored']} tokens scored"
        + (" (baseline from cache)" if b.get("from_cache") else ""),
    ]
    if cal:
        lines.append(
            f"- calibration: {cal['num_samples']} samples of at most {cal['seq_len']} tokens "
            f"({cal.get('window_layout', 'stream')} layout) = {cal['tokens']} tokens from "
            f"{cal['source']} (sha256 {cal['sha256'][:16]}, {cal['documents']} documents, seed {cal['seed']}"
            + (", overlapping windows" if cal["overlapping_windows"] else "")
            + ")"
        )
    if report.get("skipped_layers"):
        lines.append(f"- left uncompressed (shape does not fit the scheme): {', '.join(report['skipped_layers'])}")
    if report.get("vptq") and report["vptq"].get("finetune"):
        f = report["vptq"]["finetune"]
        lines.append(
            f"- VPTQ distillation: {f['steps']} steps, held-out KL {f['heldout_kl_start']:.4f} -> {f['heldout_kl_best']:.4f}"
            f" (kept step {f['best_step']}; norms {'learned' if f['train_norms'] else 'fixed'})"
        )
    if report.get("sparsity"):
        s = report["sparsity"]
        lines.append(f"- sparsity {s['pattern']} on {len(s['layers'])} layers; weights refilled by later stages and re-zeroed: {s['refilled_by_later_stages']}")
    lines.append("- timings (s): " + ", ".join(f"{k} {v}" for k, v in report["timings_s"].items()))
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    (Path(folder) / "report.md").write_text("\n".join(lines) + "\n")
