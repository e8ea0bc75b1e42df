"""COMPRESS_PATH_FORCE (compress/runtime/paths.py): the switch same-process A/B runs of a decode step use to put a
path into the CUDA graph whatever its cold single-call time (bench/results/h100/e2e/session11/)."""

import time

import torch


def _sleeper(ms: float):
    """A candidate that takes `ms` of host time and returns the same value as every other (so all of them match)."""
    def fn():
        time.sleep(ms / 1e3)
        return torch.ones(4) * 2
    return fn


def test_forced_path_wins_where_it_runs_and_matches(monkeypatch):
    """COMPRESS_PATH_FORCE (A/B runs) takes a named candidate over a faster one, but never one that failed."""
    from compress.runtime.paths import PathTable

    table = PathTable()
    table.measure_on_cpu = True
    x = torch.ones(4)

    def broken():
        raise RuntimeError("no kernel here")

    cands = [("fast", lambda: x * 2), ("slow", _sleeper(10)), ("broken", broken)]
    monkeypatch.setenv("COMPRESS_PATH_FORCE", "broken,slow")
    table.run(("k", 1, 1, 1, "f"), cands, torch.device("cpu"))
    assert table.choice[("k", 1, 1, 1, "f")] == "slow"
    monkeypatch.delenv("COMPRESS_PATH_FORCE")
    table.run(("k2", 1, 1, 1, "f"), cands, torch.device("cpu"))
    assert table.choice[("k2", 1, 1, 1, "f")] == "fast"


def test_preferred_path_wins_within_its_tolerance_only(monkeypatch):
    """COMPRESS_PATH_PREFER (the H200's default: the warp-specialized int4 GEMV within 10%, session 32): a preferred
    candidate up to its tolerance slower than the fastest is chosen, and the table says why; a slower one, or a tolerance
    of 0, is not; without a GPU or the variable nothing is preferred."""
    from compress.runtime.paths import PathTable

    def choice(cands, prefer=None):
        if prefer is None:
            monkeypatch.delenv("COMPRESS_PATH_PREFER", raising=False)
        else:
            monkeypatch.setenv("COMPRESS_PATH_PREFER", prefer)
        table = PathTable()
        table.measure_on_cpu, table.cpu_samples = True, 5
        table.run(("k",), cands, torch.device("cpu"))
        return table.choice[("k",)], table.timings[("k",)]

    # Host-clock medians of sleeps: margins of several ms, so a loaded CI machine does not reorder them.
    close = [("fast", _sleeper(20)), ("cuda_ws_gemv", _sleeper(26))]  # +30%
    got, timings = choice(close, "cuda_ws_gemv:0.6")
    assert got == "cuda_ws_gemv" and timings["cuda_ws_gemv (preferred)"] == "within 60% of fast"
    assert choice(close, "cuda_ws_gemv:0")[0] == "fast"
    assert choice(close, "")[0] == "fast"
    assert choice(close)[0] == "fast"  # a CPU: no GPU's preference applies
    assert choice([("fast", _sleeper(20)), ("cuda_ws_gemv", _sleeper(60))], "cuda_ws_gemv:0.6")[0] == "fast"  # +200%
    assert choice([("fast", _sleeper(20)), ("other", _sleeper(26))], "other:0.6,cuda_ws_gemv:0.6")[0] == "other"
    # A family (one path under several launch configs, paths.family): its fastest member is what is preferred.
    fam = [("fast", _sleeper(20)), ("cuda_ws_gemv", _sleeper(60)), ("cuda_ws_gemv#9", _sleeper(26))]
    got, timings = choice(fam, "cuda_ws_gemv:0.6")
    assert got == "cuda_ws_gemv#9" and timings["cuda_ws_gemv#9 (preferred)"] == "within 60% of fast"


def test_a_forced_path_names_its_family(monkeypatch):
    """COMPRESS_PATH_FORCE=cuda_ws_gemv takes the fastest of the WS GEMV's configs, not the first."""
    from compress.runtime.paths import PathTable, family

    assert family(["a", "a#2", "ab", "b#a", "a#"], "a") == ["a", "a#2", "a#"]
    monkeypatch.setenv("COMPRESS_PATH_FORCE", "cuda_ws_gemv")
    table = PathTable()
    table.measure_on_cpu, table.cpu_samples = True, 3
    cands = [("fast", _sleeper(1)), ("cuda_ws_gemv", _sleeper(40)), ("cuda_ws_gemv#9", _sleeper(20))]
    table.run(("k",), cands, torch.device("cpu"))
    assert table.choice[("k",)] == "cuda_ws_gemv#9"


def test_preference_setting_is_checked_with_the_fix(monkeypatch):
    import pytest

    from compress.errors import CompressError
    from compress.runtime.paths import preferred_paths

    monkeypatch.delenv("COMPRESS_PATH_PREFER", raising=False)
    assert preferred_paths("NVIDIA H200") == {"cuda_ws_gemv": 0.1}  # measured there (session 32)
    assert preferred_paths("NVIDIA H100 80GB HBM3") == {} and preferred_paths(None) == {}  # not measured there
    monkeypatch.setenv("COMPRESS_PATH_PREFER", "cuda_ws_gemv:0.05")
    assert preferred_paths("NVIDIA H100 80GB HBM3") == {"cuda_ws_gemv": 0.05}
    for bad in ("cuda_ws_gemv", "cuda_ws_gemv:lots", "cuda_ws_gemv:2", ":0.1"):
        monkeypatch.setenv("COMPRESS_PATH_PREFER", bad)
        with pytest.raises(CompressError, match=r"COMPRESS_PATH_PREFER=.* is not name:tolerance .*use \"\" for none"):
            preferred_paths()
