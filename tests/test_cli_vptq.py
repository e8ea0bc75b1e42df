"""`compress run` with a distilled VPTQ recipe on stories260K, through the CLI: the checkpoint holds the
refined codebooks and the learned norms, and `compress eval` of it scores what the run reported."""
from __future__ import annotations

import json

import torch
import yaml
from typer.testing import CliRunner

from compress.cli import app

from tests.conftest import ROOT

runner = CliRunner()
SMALL = ["--num-samples", "8", "--seq-len", "96", "--eval-dataset", "tinystories", "--eval-seq-len", "256", "--max-windows", "4"]


def test_distilled_vptq_recipe_runs_and_its_checkpoint_scores_what_the_run_said(stories_dir, tmp_path):
    recipe = yaml.safe_load((ROOT / "recipes" / "vptq_v8_k4096_r128_own8_ft.yaml").read_text())
    args = recipe["vptq_stage"]["vptq_modifiers"]["VPTQModifier"]
    # The bundled recipe, shrunk for a 64-wide model and a CPU test (stories260K's 172-wide MLP needs
    # indivisible: shrink); distillation and learned norms stay on, as in the preset.
    args.update(num_centroids=64, num_res_centroids=8, kmeans_iters=4, own_codebooks=1, indivisible="shrink",
                finetune_steps=8, finetune_batch=2, finetune_lr=3e-3)
    path = tmp_path / "ft.yaml"
    path.write_text(yaml.safe_dump(recipe))
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 64-wide matrices: one thread is faster (tests/test_cli_run.py)
    try:
        out = tmp_path / "ckpt"
        r = runner.invoke(app, ["run", str(path), "--model", str(stories_dir), "--output", str(out), "--json", *SMALL])
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout[r.stdout.index("{"):])
        e = runner.invoke(app, ["eval", str(out), "--dataset", "tinystories", "--seq-len", "256", "--max-windows", "4", "--json"])
        assert e.exit_code == 0, e.output
    finally:
        torch.set_num_threads(before)
    evaluated = json.loads(e.stdout[e.stdout.index("{"):])["results"][0]["ppl"]
    assert abs(evaluated - report["ppl_after"]["ppl"]) / evaluated < 1e-3, (evaluated, report["ppl_after"])
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["format"] == "compress.vptq"
    # inspect counts what the fit counts: indices, row scales and every codebook once (shared ones included)
    i = runner.invoke(app, ["inspect", str(out), "--json"])
    assert i.exit_code == 0, i.output
    bits = json.loads(i.stdout)["totals"]["linear_bits_per_weight"]
    assert bits == round(config["quantization_config"]["size"]["bits_per_weight"], 4) == report["bits_per_weight"]
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0  # the table renders the shared-codebook row
    ft = json.loads((out / "report.json").read_text())["vptq"]["finetune"]
    assert ft["steps"] == 8 and ft["train_norms"] and ft["heldout_kl_best"] <= ft["heldout_kl_start"]
    assert "VPTQ distillation: 8 steps" in (out / "report.md").read_text()
