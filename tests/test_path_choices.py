"""Path choices files (compress/runtime/paths.py: `PathTable.save`, COMPRESS_PATH_CHOICES; `compress bench e2e
--save-paths`): the paths one process chose, served by a later one on the same GPU model."""

from __future__ import annotations

import json

import pytest
import torch

from compress.errors import CompressError
from compress.runtime import paths
from compress.runtime.paths import PathTable
from tests.conftest import needs_triton
from tests.conftest import triton_interpreter_works  # noqa: F401 (the skip condition names it)
from tests.test_graph_tune import measured_tiny_step  # noqa: F401 (a fixture)
from tests.test_path_force import _sleeper

KEY = ("compress.int4[128, True]", 4096, 4096, 1, "torch.float16")


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch):
    for v in ("COMPRESS_PATH_CHOICES", "COMPRESS_PATH_FORCE", "COMPRESS_PATH_PREFER"):
        monkeypatch.delenv(v, raising=False)
    paths._saved.clear()
    yield
    paths._saved.clear()


def _table():
    t = PathTable()
    t.measure_on_cpu, t.cpu_samples = True, 3
    return t


def _choices_file(tmp_path, choice: dict, gpu=None):
    t = PathTable()
    t.choice.update(choice)
    f = tmp_path / "paths.json"
    assert t.save(f, gpu) == len(choice)
    assert [p.name for p in tmp_path.iterdir()] == ["paths.json"]  # no partial file left beside it
    return f


def test_a_saved_choice_is_served_over_a_faster_single_call(tmp_path, monkeypatch):
    f = _choices_file(tmp_path, {KEY: "slow", ("other", 1, 1, 1, "f"): "x"})
    doc = json.loads(f.read_text())
    assert doc["format"] == paths.CHOICES_FORMAT and doc["gpu"] is None
    assert {"key": ["compress.int4[128, True]", "4096", "4096", "1", "torch.float16"], "chosen": "slow"} in doc["choices"]
    cands = [("fast", _sleeper(1)), ("slow", _sleeper(20))]
    t = _table()
    t.run(KEY, cands, torch.device("cpu"))
    assert t.choice[KEY] == "fast"  # without the file
    monkeypatch.setenv("COMPRESS_PATH_CHOICES", str(f))
    t = _table()
    t.run(KEY, cands, torch.device("cpu"))
    assert t.choice[KEY] == "slow" and t.timings[KEY]["slow (saved)"] == "COMPRESS_PATH_CHOICES"
    # A key the file does not list, or a saved path this process does not offer: chosen as usual, and said so.
    t.run(("unlisted",), cands, torch.device("cpu"))
    assert t.choice[("unlisted",)] == "fast"
    t.run(KEY[:3] + (2, KEY[4]), cands, torch.device("cpu"))
    assert t.choice[KEY[:3] + (2, KEY[4])] == "fast"
    t = _table()
    t.run(KEY, [("fast", _sleeper(1)), ("other", _sleeper(20))], torch.device("cpu"))
    assert t.choice[KEY] == "fast" and "not offered here" in t.timings[KEY]["slow (saved)"]
    # COMPRESS_PATH_FORCE (same-process A/B runs) still wins over the file.
    monkeypatch.setenv("COMPRESS_PATH_FORCE", "fast")
    t = _table()
    t.run(KEY, cands, torch.device("cpu"))
    assert t.choice[KEY] == "fast"


def test_a_saved_choice_that_fails_or_mismatches_is_not_served(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPRESS_PATH_CHOICES", str(_choices_file(tmp_path, {KEY: "wrong"})))

    def wrong():
        return torch.ones(4) * 3  # the first candidate returns 2s

    t = _table()
    t.run(KEY, [("fast", _sleeper(1)), ("wrong", wrong)], torch.device("cpu"))
    assert t.choice[KEY] == "fast" and "mismatch" in " ".join(t.timings[KEY])


def test_bad_choices_files_get_one_line_errors_with_the_fix(tmp_path, monkeypatch):
    cases = {tmp_path / "missing.json": "cannot read it", tmp_path / "bad.json": "not JSON",
             tmp_path / "other.json": "not a path choices file"}
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something/1", "choices": []}))
    for f, what in cases.items():
        monkeypatch.setenv("COMPRESS_PATH_CHOICES", str(f))
        with pytest.raises(CompressError, match=f"COMPRESS_PATH_CHOICES={f}: {what}.*--save-paths FILE.*unset") as e:
            paths.saved_choices(None)
        assert "\n" not in str(e.value)
    h200 = tmp_path / "h200" / "paths.json"
    h200.parent.mkdir()
    PathTable().save(h200, "NVIDIA H200")
    monkeypatch.setenv("COMPRESS_PATH_CHOICES", str(h200))
    assert paths.saved_choices("NVIDIA H200") == {}
    with pytest.raises(CompressError, match="chosen on NVIDIA H200, this is NVIDIA H100 80GB HBM3; paths rank differently"):
        paths.saved_choices("NVIDIA H100 80GB HBM3")
    with pytest.raises(CompressError, match="chosen on NVIDIA H200, this is a CPU"):
        paths.saved_choices(None)


@needs_triton
def test_the_runtime_serves_a_saved_choice_through_a_decode_step(tmp_path, monkeypatch, measured_tiny_step):
    """The real runtime (a tiny fp16 Llama, its GEMV candidates in Triton's interpreter on the CPU): the choices one
    warm-up made, saved with one key changed to another candidate, are what a later warm-up with the file serves."""
    from compress.runtime.generate import Generator
    from compress.runtime.paths import TABLE

    model, _, ids = measured_tiny_step
    key = next(k for k, t in TABLE.timings.items() if len([v for v in t.values() if isinstance(v, float)]) > 1)
    other = next(n for n, v in TABLE.timings[key].items() if isinstance(v, float) and n != TABLE.choice[key])
    TABLE.choice[key] = other
    first = dict(TABLE.choice)
    f = tmp_path / "paths.json"
    TABLE.save(f, None)
    TABLE.clear()
    monkeypatch.setenv("COMPRESS_PATH_CHOICES", str(f))
    Generator(model, 1, 6, 2, engine="fast").warmup(ids)
    assert TABLE.choice[key] == other and TABLE.choice == first


def test_e2e_save_paths(tmp_path):
    """--save-paths writes the one model's choices (none for stories260K in fp32 on a CPU: no layer has two paths) and
    says how to serve them; it refuses several models and a folder before any work."""
    from compress.bench.e2e import run_e2e
    from tests.conftest import STORIES

    lines = []
    f = tmp_path / "sub" / "paths.json"
    run_e2e([str(STORIES)], workloads="tiny:1/8/3", runs=1, device="cpu", save_paths=f, log=lines.append)
    doc = json.loads(f.read_text())
    assert doc["format"] == paths.CHOICES_FORMAT and doc["gpu"] is None and doc["choices"] == []
    assert f"wrote 0 path choices to {f}; serve them with COMPRESS_PATH_CHOICES={f}" in lines
    with pytest.raises(CompressError, match="--save-paths .*needs exactly one model .*got 2; run one command per model"):
        run_e2e(synthetic="llama-3-8b", formats="fp16,w4a16", save_paths=f)
    with pytest.raises(CompressError, match="is a folder; name a file"):
        run_e2e([str(STORIES)], save_paths=tmp_path)
