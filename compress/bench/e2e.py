"""`compress bench e2e`: end-to-end greedy generation of compressed checkpoints on our runtime.

For each checkpoint (or synthetic model) and workload: load through `compress.runtime` (our
kernels), generate a fixed number of tokens with a static KV cache and CUDA graphs, and report
latency, TTFT, TPOT, output / overall / input throughput and peak GPU memory as mean ± std over
runs, in seed 002's layout, with a ranking, the decode bound, JSON and PNG plots.

`run_e2e(...)` is the pipeline function; `e2e(...)` is the Typer command the CLI registers.
"""

from __future__ import annotations

import gc
import json
import platform
import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from compress.bench import e2e_report
from compress.bench.e2e_measure import (
    WorkloadResult,
    copy_bandwidth_gbs,
    decode_weight_bytes,
    logit_checks,
    measure_workload,
)
from compress.bench.e2e_profile import profile_steps
from compress.bench import e2e_synthetic
from compress.bench.e2e_synthetic import build_synthetic, parse_formats
from compress.bench.e2e_workloads import WORKLOADS, parse_workloads
from compress.errors import CompressError

SYNTHETIC_NOTE = ("random weights (std 0.02) in the published architecture, compressed data-free "
                  "(RTN int4 group 128, RTN int8 per channel, fp8 per channel, 2:4 magnitude pruning, random VPTQ "
                  "codebooks); speed does not depend on weight values, quality numbers would be meaningless")


class Synthetic(str, Enum):
    llama_3_8b = "llama-3-8b"
    qwen3_8b = "qwen3-8b"
    llama_3_70b_layers = "llama-3-70b-layers"


def _device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cuda", "cpu"):
        raise CompressError(f"--device {device!r} is not supported; use auto, cuda or cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise CompressError("--device cuda but no CUDA GPU is visible; use --device cpu")
    return torch.device(device)


def _label(path: Path) -> str:
    """Checkpoint label in the tables: the recipe that made it (config.json['compress']), else the folder name."""
    try:
        cfg = json.loads((path / "config.json").read_text())
        recipe = (cfg.get("compress") or {}).get("recipe")
        if isinstance(recipe, dict):
            recipe = recipe.get("name")
        if isinstance(recipe, str) and recipe:
            return recipe
    except (OSError, ValueError):
        pass
    return path.name


def _meta(device: torch.device, command: str, synthetic: str | None, engine: str, cuda_graphs: bool, runs: int,
          seed: int, copy_bw: float) -> dict:
    import transformers

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        dev = f"{props.name} ({props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
    else:
        dev = f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    try:
        import triton

        triton_v = triton.__version__
    except ImportError:
        triton_v = None
    graphs = ("CUDA graphs for prefill and decode (fast engine) / decode (transformers engine)" if cuda_graphs and
              device.type == "cuda" else "no CUDA graphs (CPU run: the graph path is GPU-only)" if device.type != "cuda"
              else "CUDA graphs off")
    return {
        "command": command, "device": dev, "torch": torch.__version__, "transformers": transformers.__version__,
        "triton": triton_v, "python": platform.python_version(), "synthetic": SYNTHETIC_NOTE if synthetic else None,
        "engine": engine, "runs": runs, "seed": seed, "copy_bw_gbs": copy_bw,
        "method": (f"greedy decoding of exactly output_len tokens (no early stop), static KV cache, {graphs}; "
                   f"1 warm-up generation then {runs} timed runs; prompts are seeded random token ids; timings with "
                   "CUDA events on the GPU (perf_counter on CPU): TTFT = prefill + first token, TPOT = (latency - TTFT) / "
                   "(output_len - 1); throughputs: output = batch*output_len/latency, overall = batch*(input_len+output_len)"
                   "/latency, input = batch*input_len/TTFT; peak = torch.cuda.max_memory_allocated per run"),
    }


def run_e2e(
    checkpoints: list[Path] | None = None,
    workloads: str | None = None,
    runs: int = 3,
    synthetic: str | None = None,
    formats: str | None = None,
    profile: bool = False,
    output: Path | None = None,
    device: str = "auto",
    engine: str = "auto",
    cuda_graphs: bool = True,
    seed: int = 0,
    command: str | None = None,
    log=print,
    tune_paths: bool = False,
    save_paths: Path | None = None,
) -> dict:
    """Benchmark every checkpoint (and/or every synthetic format) on every workload; write the report.
    tune_paths: per workload, choose the decode step's paths by timing the step (compress.runtime.graph_tune).
    save_paths: write the path choices of the one model benchmarked as a choices file (COMPRESS_PATH_CHOICES,
    compress.runtime.paths), for later processes to serve the same paths.

    Returns the JSON document (meta, models, results, profiles) and, under "written", the files.
    """
    checkpoints = list(checkpoints or [])
    if not checkpoints and not synthetic:
        raise CompressError("nothing to benchmark: pass --checkpoint DIR (repeatable) or --synthetic ARCH")
    if runs < 1:
        raise CompressError(f"--runs {runs}: needs at least 1 timed run")
    if synthetic and synthetic not in e2e_synthetic.ARCHS:
        raise CompressError(f"--synthetic {synthetic!r} is unknown; choose from {', '.join(e2e_synthetic.ARCHS)}")
    if formats and not synthetic:
        raise CompressError("--formats applies to --synthetic models only; checkpoints carry their own format")
    for c in checkpoints:
        if not (Path(c) / "config.json").is_file():
            raise CompressError(f"--checkpoint {c}: not a model folder (no config.json); pass a `compress run` output")
    wls = parse_workloads(workloads)
    fmts = parse_formats(formats) if synthetic else []
    if save_paths is not None and len(checkpoints) + len(fmts) != 1:
        raise CompressError(f"--save-paths {save_paths}: needs exactly one model (one --checkpoint, or --synthetic with "
                            f"one --formats entry), got {len(checkpoints) + len(fmts)}; run one command per model")
    if save_paths is not None and Path(save_paths).is_dir():
        raise CompressError(f"--save-paths {save_paths} is a folder; name a file, e.g. {Path(save_paths) / 'paths.json'}")
    dev = _device(device)
    torch.manual_seed(seed)
    if dev.type == "cuda":
        # Each workload shape compiles the glue once; the defaults (8 per function) are too few for 7 workloads.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    copy_bw = copy_bandwidth_gbs(dev)
    meta = _meta(dev, command or "run_e2e(...)", synthetic, engine, cuda_graphs, runs, seed, copy_bw)
    if dev.type != "cuda":
        log("note: CPU run -- the CUDA-graph path is skipped (GPU only); timings are eager CPU timings")
    if synthetic:
        log(f"note: --synthetic {synthetic}: weights are synthetic ({SYNTHETIC_NOTE})")
    log(f"copy bandwidth: {copy_bw:.0f} GB/s")

    sources = [("checkpoint", Path(c), None) for c in checkpoints] + [("synthetic", synthetic, f) for f in fmts]
    models, results, profiles = [], [], []
    for kind, what, fmt in sources:
        label = _label(Path(what)) if kind == "checkpoint" else f"{what}_{fmt}"
        try:
            _bench_model(kind, what, fmt, label, dev, wls, runs, engine, cuda_graphs, seed, profile, copy_bw,
                         models, results, profiles, log, tune_paths)
        except CompressError:
            raise
        except Exception as e:  # one broken model must not cost the others' measurements
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            log(f"{label}: FAILED ({msg}); continuing with the next model")
            if not models or models[-1]["label"] != label:
                models.append({"label": label, "source": str(what), "synthetic": kind == "synthetic", "formats": {},
                               "backends": {}, "weight_bytes": 0, "copy_bw_gbs": copy_bw, "bound_ms": None})
            models[-1]["error"] = msg
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if output is not None:  # after every model, so that an interrupted run keeps what it measured
            e2e_report.write(Path(output), meta, models, results, profiles)

    if save_paths is not None:
        _save_paths(Path(save_paths), dev, models, log)
    doc = {"meta": meta, "models": models, "results": [r.to_json() for r in results], "profiles": profiles}
    if output is not None:
        doc["written"] = e2e_report.write(Path(output), meta, models, results, profiles)
    doc["markdown"] = e2e_report.markdown(meta, models, results, profiles)
    return doc


def _save_paths(path: Path, dev: torch.device, models: list[dict], log) -> None:
    """--save-paths: the path table's choices for the model just benchmarked (it is cleared per model)."""
    from compress.runtime.paths import TABLE, gpu_of

    if not models or models[-1].get("error"):
        log(f"--save-paths {path}: not written, the model failed ({models[-1]['error'] if models else 'no model'})")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    n = TABLE.save(path, gpu_of(dev))
    log(f"wrote {n} path choices to {path}; serve them with COMPRESS_PATH_CHOICES={path}")


def _bench_model(kind, what, fmt, label, dev, wls, runs, engine, cuda_graphs, seed, profile, copy_bw, models, results,
                 profiles, log, tune_paths: bool = False) -> None:
    from compress.runtime.paths import TABLE

    TABLE.clear()  # each model's report lists the path choices measured for it
    if kind == "checkpoint":
        from compress.runtime import load

        model = load(what, device=dev)
    else:
        model = build_synthetic(what, fmt, dev, seed=seed)
    info = model.compress_runtime
    wbytes = decode_weight_bytes(model)
    entry = {"label": label, "source": str(what) if kind == "checkpoint" else f"synthetic:{what}:{fmt}",
             "synthetic": kind == "synthetic", "formats": info.formats, "backends": info.backends,
             "fallback_reasons": info.fallback_reasons, "weight_bytes": wbytes, "copy_bw_gbs": copy_bw,
             "bound_ms": wbytes / (copy_bw * 1e9) * 1e3}
    models.append(entry)
    entry["checks"] = logit_checks(model, seed)
    log(f"{label}: {info.summary()}; {wbytes / 1e9:.3f} GB of weights per step -> bound {entry['bound_ms']:.3f} ms; "
        f"checks: {entry['checks']}")
    for wl in wls:
        results.append(measure_workload(model, label, wl, runs, engine, cuda_graphs, seed, log, tune_paths))
        if results[-1].skipped:
            log(f"  {label} {wl.name}: skipped ({results[-1].skipped})")
    if profile:
        pwl = next((w for w in wls if w.name == "decode_bound"), wls[0])
        profiles.append({"model": label, **profile_steps(model, pwl, engine, seed)})
    entry["paths"] = TABLE.report()


def canonical_command(checkpoint, workloads, runs, synthetic, formats, profile, output, device, engine, cuda_graphs,
                      seed, tune_paths: bool = False, save_paths: Path | None = None) -> str:
    """The command line that reproduces a run (recorded in the report), options in a fixed order."""
    parts = ["compress", "bench", "e2e"]
    for c in checkpoint or []:
        parts += ["--checkpoint", str(c)]
    if synthetic:
        parts += ["--synthetic", synthetic]
    if formats:
        parts += ["--formats", formats]
    parts += ["--workloads", workloads, "--runs", str(runs)]
    if profile:
        parts.append("--profile")
    if tune_paths:
        parts.append("--tune-paths")
    if save_paths is not None:
        parts += ["--save-paths", str(save_paths)]
    if device != "auto":
        parts += ["--device", device]
    if engine != "auto":
        parts += ["--engine", engine]
    if not cuda_graphs:
        parts.append("--no-cuda-graphs")
    if seed:
        parts += ["--seed", str(seed)]
    if output is not None:
        parts += ["--output", str(output)]
    return " ".join(shlex.quote(p) for p in parts)


def e2e(
    checkpoint: Annotated[Optional[list[Path]], typer.Option("--checkpoint", "-c", help="Checkpoint folder (repeatable).")] = None,
    workloads: Annotated[str, typer.Option(help=f"'all', names ({', '.join(WORKLOADS)}) or custom 'name:batch/input/output', comma-separated.")] = "all",
    runs: Annotated[int, typer.Option(min=1, help="Timed runs per workload (after one warm-up).")] = 3,
    synthetic: Annotated[Optional[Synthetic], typer.Option(help="Benchmark a published architecture with random weights instead of (or besides) checkpoints.")] = None,
    formats: Annotated[Optional[str], typer.Option(help="Synthetic formats, comma-separated: fp16,w4a16,w8a16,w8a8,fp8,sparse24,w8a8-sparse24,w8a16-sparse24,vptq (default: all but w8a16 and w8a16-sparse24).")] = None,
    profile: Annotated[bool, typer.Option("--profile", help="Add torch.profiler tables of one prefill and one decode step.")] = False,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Folder for e2e.md, e2e.json and the PNG plots.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the JSON document on stdout instead of the tables.")] = False,
    device: Annotated[str, typer.Option(help="auto, cuda or cpu.")] = "auto",
    engine: Annotated[str, typer.Option(help="auto (fast Llama-family path where supported), fast, or hf (transformers forward).")] = "auto",
    cuda_graphs: Annotated[bool, typer.Option("--cuda-graphs/--no-cuda-graphs", help="Capture prefill/decode as CUDA graphs (GPU).")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the prompts and of synthetic weights.")] = 0,
    tune_paths: Annotated[bool, typer.Option("--tune-paths", help="Before timing each workload, choose its decode step's paths by timing the step itself (each candidate of each layer shape in turn, graphs re-captured) instead of by single calls; the report lists each choice with the TPOTs it saw. Costs one generation per candidate, and a second pass where the first changed a choice. Worth it on a GPU the kernels' config tables have not measured (only the H200's are): it also times the int4 GEMV's launch configs in the graph.")] = False,
    save_paths: Annotated[Optional[Path], typer.Option("--save-paths", help="Write the path chosen for each layer shape (by --tune-paths where given) to this JSON file. Any later process that runs models through compress.runtime with COMPRESS_PATH_CHOICES=FILE set serves the same paths (each still checked to run and match) instead of the fastest single call, on the same GPU model. Needs exactly one model.")] = None,
) -> None:
    """End-to-end generation benchmark: TTFT, TPOT, throughput and peak memory per checkpoint and workload."""
    command = canonical_command(checkpoint, workloads, runs, synthetic.value if synthetic else None, formats, profile,
                                output, device, engine, cuda_graphs, seed, tune_paths, save_paths)
    log = (lambda msg: print(msg, file=sys.stderr)) if json_out else print
    doc = run_e2e(checkpoint, workloads, runs, synthetic.value if synthetic else None, formats, profile, output, device,
                  engine, cuda_graphs, seed, command, log, tune_paths, save_paths)
    if json_out:
        doc.pop("markdown", None)
        print(json.dumps(doc, indent=2))
        return
    print(doc.pop("markdown"))
    if "written" in doc:
        print(f"\nwrote {', '.join(doc['written']['files'])} to {doc['written']['folder']}")


if __name__ == "__main__":  # `python -m compress.bench.e2e ...` runs the command without the CLI wiring
    typer.run(e2e)
