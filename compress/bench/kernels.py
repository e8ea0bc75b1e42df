"""`compress bench kernels`: time our Triton kernels against torch fp16 (and peers) on the GPU and write
the tables (markdown), the raw rows (JSON) and one plot per suite (PNG).

The VPTQ table reproduces the seed-000 format row for row; the W4A16 / W8A8 / 2:4 tables cover the
Llama-3-8B and 70B layer shapes over M in {1 .. 1024} with achieved GB/s and % of the copy bandwidth
measured in the same run.

Timing (`--timing`, compress.bench.kernel_timing): "rotate" by default -- each call replayed >= 120 times back
to back in one CUDA graph over weight copies >= 2.5x the L2, per-call median, as in a decode step; "flush" --
one call per graph replay with the L2 flushed before each (triton do_bench; a ~5 us floor under every row).
Ours, torch fp16 and the peers are timed by the same method in the same run; the report header names it.
"""

from __future__ import annotations

import json
import re
import shlex
import statistics
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import torch
import typer

from compress.errors import CompressError

SUITE_ORDER = ["vptq", "w4a16", "w8a8", "sparse24"]


class Timing(str, Enum):
    rotate = "rotate"
    flush = "flush"


class KernelSuite(str, Enum):
    vptq = "vptq"
    w4a16 = "w4a16"
    w8a8 = "w8a8"
    sparse24 = "sparse24"
    all = "all"


def _f(v, digits=4) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def vptq_markdown(rows: list[dict]) -> str:
    header = ["count", "batch_size", "in_features", "out_features", "main_centroids", "residual_centroids", "vptq (ms)",
              "torch (ms)", "ratio"]
    body = [[str(r["count"]), str(r["batch_size"]), str(r["in_features"]), str(r["out_features"]), str(r["main_centroids"]),
             str(r["residual_centroids"]), _f(r["vptq_ms"]), _f(r["torch_ms"]), _f(r["ratio"], 2)] for r in rows]
    ratios = [r["ratio"] for r in rows]
    summary = (f"\n\nratio = vptq / torch fp16 `F.linear` (lower is faster). Rows: {len(rows)}; median ratio "
               f"{statistics.median(ratios):.3f}; max {max(ratios):.3f}; rows with ratio <= 1.0: "
               f"{sum(x <= 1.0 for x in ratios)}/{len(rows)}.")
    return _table(header, body) + summary


def linear_markdown(rows: list[dict], peer_key: str | None, peer_label: str | None, dense_label: str | None = None,
                    peers: list[tuple[str, str]] = ()) -> str:
    """One row per (layer, M); `peers` adds (row key, column label) pairs after the first peer; a `path` column
    (which kernel and tiles ran) closes the table when the rows carry it."""
    header = ["layer", "N", "K", "M", "kernel (ms)", "torch fp16 (ms)", "ratio", "speedup", "GB/s", "% copy BW"]
    if dense_label:
        header.append(dense_label)
    if peer_key:
        header.append(peer_label)
    header += [label for _, label in peers]
    with_path = any("path" in r for r in rows)
    if with_path:
        header.append("path")
    body = []
    for r in rows:
        cells = [r["layer"] + (f" [{r['variant']}]" if r.get("variant") else ""), str(r["N"]), str(r["K"]), str(r["M"]),
                 _f(r["kernel_ms"]), _f(r["torch_ms"]), _f(r["ratio"], 2), _f(r["speedup"], 2) + "x", _f(r["gbs"], 0),
                 _f(r["pct_copy_bw"], 0)]
        if dense_label:
            cells.append(_f(r["dense_ms"] / r["kernel_ms"], 2) + "x")
        if peer_key:
            cells.append(_f(r.get(peer_key)))
        cells += [_f(r.get(key)) for key, _ in peers]
        if with_path:
            cells.append(r.get("path", ""))
        body.append(cells)
    return _table(header, body)


def _median_by_m(rows: list[dict], key: str) -> dict[int, float]:
    ms = sorted({r["M"] for r in rows})
    return {m: statistics.median(r[key] for r in rows if r["M"] == m) for m in ms}


def targets(results: dict[str, list[dict]]) -> list[str]:
    """One line per issue-3 target: measured value, target, PASS/MISS."""
    out = []

    def line(label, value, ok):
        out.append(f"- {label}: {value} -> {'PASS' if ok else 'MISS'}")

    if "vptq" in results:
        ratios = [r["ratio"] for r in results["vptq"]]
        line("VPTQ ratio <= 1.0 on every row", f"max {max(ratios):.3f}", max(ratios) <= 1.0)
        line("VPTQ median ratio <= 0.35", f"{statistics.median(ratios):.3f}", statistics.median(ratios) <= 0.35)
    if "w4a16" in results:
        main = [r for r in results["w4a16"] if not r.get("variant")]
        med = _median_by_m(main, "speedup")
        if 1 in med:
            line("W4A16 g128 >= 3.0x at M=1 (median)", f"{med[1]:.2f}x", med[1] >= 3.0)
        if 16 in med:
            line("W4A16 g128 >= 2.5x at M=16 (median)", f"{med[16]:.2f}x", med[16] >= 2.5)
        slow = [r for r in main if r["M"] <= 64 and r["speedup"] < 1.0]
        line("W4A16 never slower than fp16 up to M=64", f"{len(slow)} slower rows", not slow)
    if "w8a8" in results:
        med = _median_by_m(results["w8a8"], "speedup")
        small = [med[m] for m in med if m <= 16]
        if small:
            line("W8A8 >= 1.8x at M=1..16 (median per M, worst M)", f"{min(small):.2f}x", min(small) >= 1.8)
        if 256 in med:
            line("W8A8 >= 1.3x at M=256 (median)", f"{med[256]:.2f}x", med[256] >= 1.3)
    if "sparse24" in results:
        for variant in ("fp16", "int8 (W8A8)", "int8 (W8A16)"):
            rows = [r for r in results["sparse24"] if r.get("variant") == variant and r["M"] == 1]
            if rows:
                v = statistics.median(r["dense_ms"] / r["kernel_ms"] for r in rows)
                line(f"2:4 {variant} >= 1.3x over dense same precision at M=1 (median)", f"{v:.2f}x", v >= 1.3)
    return out


def write_plot(suite: str, rows: list[dict], path: Path, device: str | None = None) -> None:
    """<suite>.png from the suite's rows; device: the GPU's name for the title (default: this machine's GPU), so a
    kernels.json can be plotted again where it was not measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    if suite == "vptq":
        ax.bar(range(1, len(rows) + 1), [r["ratio"] for r in rows], color="tab:blue")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(0.35, color="tab:red", lw=0.8, ls="--", label="target median 0.35")
        ax.set_xlabel("seed-000 row (count)")
        ax.set_ylabel("vptq / torch fp16 (lower is faster)")
        ax.legend()
    else:
        main = [r for r in rows if not r.get("variant") or r.get("variant") in ("fp16", "int8 (W8A8)", "int8 (W8A16)")]
        for key in sorted({(r["layer"], r.get("variant") or "") for r in main}):
            pts = sorted((r["M"], r["speedup"]) for r in main if (r["layer"], r.get("variant") or "") == key)
            if len(pts) > 2:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=" ".join(k for k in key if k))
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("speedup over torch fp16 F.linear")
        ax.legend(fontsize=7)
    ax.set_title(f"compress {suite} kernels, {device or torch.cuda.get_device_name(0)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_kernel_bench(suites: list[str], out_dir: Path, quick: bool = False, command: str | None = None,
                     timing: str = "rotate") -> dict:
    """Run the suites on the current CUDA device; write kernels.md, kernels.json and <suite>.png to out_dir.
    timing: "rotate" (default) or "flush" (compress.bench.kernel_timing).

    Returns {"env": {...}, "results": {suite: rows}, "targets": [lines]}.
    """
    from compress.bench.kernel_suites import SUITES
    from compress.bench.kernel_timing import check_method, copy_bandwidth_gbs, device_description, method_description

    check_method(timing)
    # The runtime's paths torch.compile small helpers (the int8 epilogue, 2:4 unpacking) per shape and dtype; one
    # process here builds the 8 Llama shapes x 9 M x 2 dtypes, a model a handful: raise dynamo's limit of 8.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 512)
    if hasattr(torch._dynamo.config, "accumulated_recompile_limit"):
        torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 4096)
    if not torch.cuda.is_available():
        raise CompressError("compress bench kernels needs a CUDA GPU and none is visible; run it on the GPU machine")
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise CompressError(f"unknown kernel suite(s) {unknown}; choose from {SUITE_ORDER} or 'all'")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = device_description()
    env["timing"] = timing
    env["timing_text"] = method_description(timing)
    env["copy_gbs"] = copy_bandwidth_gbs()
    if "w4a16" in suites:
        from kernels import w4a16_cuda

        env["w4a16_configs"] = w4a16_cuda.config_source(w4a16_cuda.gpu_name(torch.device("cuda")))
    if command is None:  # how this process was started: the CLI, or `python -m compress.bench.kernels`
        prog = "python -m compress.bench.kernels" if sys.argv and sys.argv[0].endswith("kernels.py") else "compress bench kernels"
        command = prog + " " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    env["command"] = command
    env["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    results: dict[str, list[dict]] = {}
    import compress.bench.kernel_suites as kernel_suites

    last_write = [time.time()]

    def write(run_env: dict) -> dict:  # a run cut short still leaves what it measured
        report = {"env": run_env, "results": results, "targets": targets(results)}
        (out_dir / "kernels.json").write_text(json.dumps(report, indent=1))
        (out_dir / "kernels.md").write_text(render_markdown(report))
        return report

    def progress(rows: list[dict]) -> None:  # the current suite's rows so far, written every 10 s
        results[suite] = rows
        if time.time() - last_write[0] > 10:
            last_write[0] = time.time()
            write(dict(env, partial=f"{suite}: {len(rows)} rows so far"))

    kernel_suites.PROGRESS = progress
    try:
        for suite in [s for s in SUITE_ORDER if s in suites]:
            t0 = time.time()
            results[suite] = SUITES[suite](env["copy_gbs"], quick, timing)
            env[f"{suite}_seconds"] = round(time.time() - t0, 1)
            write_plot(suite, results[suite], out_dir / f"{suite}.png")
            print(f"[bench] {suite}: {len(results[suite])} rows in {env[f'{suite}_seconds']} s", flush=True)
            report = write(env)  # after every suite
    finally:
        kernel_suites.PROGRESS = None  # no later run in this process writes into this one's report
    return report


def render_markdown(report: dict) -> str:
    env, results = report["env"], report["results"]
    parts = [
        f"# Kernel benchmark on {env['device']}",
        "",
        f"Command: `{env['command']}`  ",
        *([f"**Partial report** (the run was still going or was cut short: {env['partial']}).  "] if env.get("partial") else []),
        f"Date: {env['date']}; torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['sms']} SMs.  ",
        f"Measured device-to-device copy bandwidth: {env['copy_gbs']:.0f} GB/s (bytes read + written; 2 GiB copies "
        "launched one at a time, not in a CUDA graph: compress.bench.kernel_timing.copy_bandwidth_gbs).  ",
        f"Timing (`--timing {env.get('timing', 'flush')}`): "
        + env.get("timing_text", "triton.testing.do_bench, median of CUDA-event timings, L2 flushed before every repetition")
        + ". Ours, torch fp16 and the peers measured by that method in the same run. ratio = ours / torch fp16 "
        "(lower is faster); speedup = torch / ours. GB/s counts weights + metadata + activations + outputs once. "
        "Every timed kernel was checked against its plain-torch reference on the timed shape first (rel err column "
        "in kernels.json).",
        "",
        "## Targets",
        *report["targets"],
    ]
    if "vptq" in results:
        parts += ["", "## VPTQ fused GEMV vs torch fp16 (seed-000 format), batch 1", "", vptq_markdown(results["vptq"])]
    if "w4a16" in results:
        parts += ["", "## W4A16 (int4 g128 symmetric unless marked)", "",
                  "kernel (ms) is the fastest of our paths, each also shown: the Triton launcher (kernels/w4a16.py), "
                  "the CUDA C++ tensor-core GEMV (kernels/w4a16_cuda.py, M <= 64) and at one token the CUDA-core GEMV "
                  "(kernels/w4a16_cc.py) and the warp-specialized GEMV (kernels/w4a16_ws.py, WS), at 2-16 tokens the "
                  "warp-specialized GEMM (kernels/w4a16_ws_gemm.py, WS GEMM); `path` names the one that won. "
                  + (f"The CUDA GEMV's launch configs: {env['w4a16_configs']}. " if env.get("w4a16_configs") else "") +
                  "Peers: torch's tinygemm `_weight_int4pack_mm` (bf16 activations); gemlite (PyPI, Triton; timed where "
                  "installed, at the M values its autotuning budget allowed).", "",
                  linear_markdown(results["w4a16"], "tinygemm_ms", "tinygemm (ms)",
                                  peers=[("gemlite_ms", "gemlite (ms)"), ("triton_ms", "Triton (ms)"),
                                         ("cuda_gemv_ms", "CUDA GEMV (ms)"),
                                         ("cc_gemv_ms", "CUDA-core GEMV (ms)"),
                                         ("ws_gemv_ms", "WS GEMV (ms)"), ("ws_gemm_ms", "WS GEMM (ms)")])]
    if "w8a8" in results:
        parts += ["", "## W8A8 (per-channel int8 weights, dynamic per-token int8 activations)", "",
                  "kernel (ms): the path the runtime serves at this M -- compress.runtime's W8A8 layer offers its paths "
                  "(`kernel`: kernels/w8a8.py with its tiles; `gemv_i8_*`: the int8 GEMV of "
                  "compress/runtime/decode_kernels.py at one token; `int_mm`: torch._int_mm above 16 tokens), every "
                  "one checked and timed here, and its PathTable picks one (`path`). The activation quantization is "
                  "inside every timed call. best (ms): the fastest offered path by this table's timing. "
                  "Peer: `torch._int_mm` alone (activations already int8, no scaling; needs M > 16).", "",
                  linear_markdown(results["w8a8"], "int_mm_ms", "torch._int_mm (ms)", peers=[("best_ms", "best (ms)")])]
    if "sparse24" in results:
        parts += ["", "## 2:4 sparse (compress.sparse24)", "",
                  "kernel (ms): the path the runtime's 2:4 layer serves at this M (its PathTable's pick among the paths it "
                  "offers, each checked and timed). vs dense = dense of the same precision / ours (fp16: torch "
                  "F.linear; int8 (W8A8): the W8A8 table's kernel (ms) at the same shape and M, i.e. the runtime's dense W8A8 "
                  "path; int8 (W8A16): the runtime's dense weight-only int8 layer, per-channel scales, its PathTable's "
                  "pick). Peer: torch semi-structured sparse F.linear (fp16).", "",
                  linear_markdown(results["sparse24"], "torch_semi_structured_ms", "torch semi-structured (ms)", "vs dense",
                                  peers=[("dense_ms", "dense (ms)"), ("best_ms", "best (ms)")])]
    return "\n".join(parts) + "\n"


def gpu_folder_name(device_name: str) -> str:
    """The results folder of a GPU: its model, lower case, without the vendor and the memory suffixes
    ("NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA H200" -> "h200", "NVIDIA A100-SXM4-80GB" -> "a100")."""
    words = re.split(r"[\s_-]+", device_name.lower().replace("nvidia", " ").strip())
    word = re.sub(r"[^a-z0-9]", "", words[0]) if words and words[0] else ""
    return word or "gpu"


def kernels(
    suite: Annotated[list[KernelSuite], typer.Option("--suite", help="Which kernel suite(s) to run; repeatable.")] = [  # noqa: B006
        KernelSuite.all
    ],
    output: Annotated[Path | None, typer.Option(
        "--output", help="Directory for kernels.md, kernels.json and the plots (default: bench/results/<gpu>/kernels, "
        "e.g. h100 or h200, from the GPU's name).", show_default=False)] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer shapes and M values (a smoke run).")] = False,
    timing: Annotated[Timing, typer.Option("--timing", help="rotate: >= 120 calls back to back in one CUDA graph over "
                                           "weight copies >= 2.5x the L2 (decode-shaped, the default); flush: one "
                                           "call per replay, L2 flushed before each (triton do_bench).")] = Timing.rotate,
) -> None:
    """Benchmark the bundled GPU kernels (VPTQ, W4A16, W8A8, 2:4) against torch fp16 on this GPU."""
    names = SUITE_ORDER if any(s == KernelSuite.all for s in suite) else [s.value for s in suite]
    if output is None:  # without a GPU run_kernel_bench says so before anything is written
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "gpu"
        output = Path("bench/results") / gpu_folder_name(gpu) / "kernels"
    report = run_kernel_bench(names, output, quick=quick, timing=timing.value)
    typer.echo("\n".join(report["targets"]))
    typer.echo(f"wrote {output / 'kernels.md'}")


if __name__ == "__main__":  # python -m compress.bench.kernels (before the CLI wiring exists)
    try:
        typer.run(kernels)
    except CompressError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(1) from None
