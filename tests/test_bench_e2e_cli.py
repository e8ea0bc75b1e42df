"""`compress bench e2e` on CPU (what CI can run): the real stories260K model, the seed-002 layout,
JSON, plots, the bound, skipped workloads, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from compress.bench.e2e import e2e, run_e2e
from compress.bench.e2e_workloads import WORKLOADS, parse_workloads
from compress.errors import CompressError
from tests.conftest import STORIES as STORIES_DIR

STORIES = str(STORIES_DIR)


@pytest.fixture(scope="module")
def app():
    a = typer.Typer()
    a.command()(e2e)
    return a


def test_cli_on_real_model_writes_seed_layout(app, tmp_path):
    out = tmp_path / "e2e"
    res = CliRunner().invoke(app, ["--checkpoint", STORIES, "--workloads", "smoke:2/12/6,long_context", "--runs", "2",
                                   "--output", str(out), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "CUDA-graph path is skipped" in res.output  # the CPU run says so
    md = (out / "e2e.md").read_text()
    # Seed 002's layout: configuration heading, summary table with its columns, details, ranking.
    assert "## Configuration: batch_size=2, input_len=12, output_len=6" in md
    assert "| Model | Runs | Latency (s) | Output Throughput (tok/s) | Overall Throughput (tok/s) | Input Throughput (tok/s) |" in md
    assert "`stories260K_smoke_run2`" in md and "## Performance Ranking (by Output Throughput)" in md
    assert "\N{FIRST PLACE MEDAL} **stories260K_smoke**" in md
    assert "skipped: needs 16416 positions, the model has 512" in md
    assert "--runs 2" in md and "**Device:** CPU" in md
    doc = json.loads((out / "e2e.json").read_text())
    smoke, longc = doc["results"]
    assert smoke["engine"] == "fast" and len(smoke["runs"]) == 2 and longc["skipped"]
    r = smoke["runs"][0]
    assert 0 < r["ttft_ms"] / 1e3 < r["latency_s"]
    assert r["output_tps"] == pytest.approx(2 * 6 / r["latency_s"])
    assert r["overall_tps"] == pytest.approx(2 * (12 + 6) / r["latency_s"])
    assert smoke["stats"]["tpot_ms"]["std"] >= 0
    model = doc["models"][0]
    assert model["weight_bytes"] == 260_032 * 4  # fp32 on CPU, tied embedding counted once (as lm_head)
    assert model["bound_ms"] > 0
    for png in ("e2e_throughput.png", "e2e_tpot_vs_batch.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_tune_paths_flag_is_recorded(app, tmp_path):
    """--tune-paths runs and is part of the recorded command; stories260K in fp32 on a CPU has no layer with two paths
    to serve (the GEMV candidates are fp16/bf16), so nothing is tuned and the report has no such table."""
    out = tmp_path / "e2e"
    res = CliRunner().invoke(app, ["--checkpoint", STORIES, "--workloads", "tiny:1/8/3", "--runs", "1", "--tune-paths",
                                   "--output", str(out), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    md = (out / "e2e.md").read_text()
    assert "--runs 1 --tune-paths --device cpu" in md and "## Paths tuned" not in md
    assert json.loads((out / "e2e.json").read_text())["results"][0]["tuned"] == []


def test_json_flag_and_profile(app):
    res = CliRunner().invoke(app, ["--checkpoint", STORIES, "--workloads", "tiny:1/8/3", "--runs", "1", "--json",
                                   "--profile", "--device", "cpu", "--engine", "hf"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["results"][0]["engine"] == "hf"
    prof = doc["profiles"][0]
    assert {"prefill", "decode"} <= set(prof) and "Self CPU" in prof["decode"]["table"]
    assert prof["decode"]["top"][0]["share"] > 0


def test_bad_inputs():
    with pytest.raises(CompressError, match="nothing to benchmark"):
        run_e2e([])
    with pytest.raises(CompressError, match="unknown workload 'huge'"):
        parse_workloads("interactive,huge")
    with pytest.raises(CompressError, match="--formats applies to --synthetic"):
        run_e2e([STORIES], formats="w4a16")
    with pytest.raises(CompressError, match="not a model folder"):
        run_e2e(["/nonexistent"])
    with pytest.raises(CompressError, match="--runs 0"):
        run_e2e([STORIES], runs=0)
    with pytest.raises(CompressError, match="--synthetic 'gpt-5'"):
        run_e2e(synthetic="gpt-5")


def test_workloads_are_the_seed_ones():
    assert [(w.name, w.batch, w.input_len, w.output_len) for w in WORKLOADS.values()] == [
        ("interactive", 1, 128, 64), ("decode_bound", 1, 256, 512), ("prefill_bound", 1, 2048, 32),
        ("long_context", 1, 16384, 32), ("medium_batch", 8, 256, 128), ("base", 32, 256, 32),
        ("high_concurrency", 64, 256, 128)]
    assert [w.name for w in parse_workloads("all")] == list(WORKLOADS)


def test_merge_of_two_runs(tmp_path):
    from compress.bench.e2e_report import merge

    for name, work in (("a", "one:1/8/3,two:2/8/3"), ("b", "two:2/8/3")):
        run_e2e([STORIES], workloads=work, runs=1, device="cpu", output=tmp_path / name, log=lambda *_: None)
    out = merge([tmp_path / "a" / "e2e.json", tmp_path / "b" / "e2e.json"], tmp_path / "m")
    doc = json.loads((tmp_path / "m" / "e2e.json").read_text())
    # The model measured twice keeps its later run only (workload "one" was not re-measured: dropped).
    assert [(r["model"], r["workload"]) for r in doc["results"]] == [("stories260K", "two")]
    assert "e2e.md" in out["files"] and " + " in doc["meta"]["command"]


def test_merge_command_line_says_how_to_use_it(tmp_path):
    """`python -m compress.bench.e2e_report` with missing or unreadable inputs: one usage line, no traceback, rc != 0,
    and nothing written (session 20: `--help` was taken as the output folder)."""
    import subprocess
    import sys

    for args in ([], ["--help"], [str(tmp_path / "out"), str(tmp_path / "missing.json")]):
        r = subprocess.run([sys.executable, "-m", "compress.bench.e2e_report", *args], capture_output=True, text=True,
                           cwd=tmp_path, timeout=120)
        assert r.returncode != 0 and r.stderr.startswith("usage:") and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
