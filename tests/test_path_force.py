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


def test_a_config_variant_needs_a_margin_over_its_default():
    """paths.family_pick: a variant (name#config) is served instead of its family's head (the default config) only when
    its single call is faster by more than VARIANT_MARGIN (session 34: smaller single-call wins ranked wrong inside the
    decode graph); without the head, the fastest variant."""
    from compress.runtime.paths import VARIANT_MARGIN, family_pick

    names = ["cuda_gemv", "cuda_ws_gemv", "cuda_ws_gemv#9", "cuda_ws_gemv#12"]
    within = 1 + VARIANT_MARGIN * 0.9
    beyond = 1 + VARIANT_MARGIN * 1.1
    t = {"cuda_gemv": 5.0, "cuda_ws_gemv": 10.0 * within, "cuda_ws_gemv#9": 10.0, "cuda_ws_gemv#12": 10.5}
    assert family_pick(names, t, "cuda_ws_gemv") == "cuda_ws_gemv"
    assert family_pick(names, dict(t, cuda_ws_gemv=10.0 * beyond), "cuda_ws_gemv") == "cuda_ws_gemv#9"
    assert family_pick(names[:1] + names[2:], t, "cuda_ws_gemv") == "cuda_ws_gemv#9"  # the head did not run
    assert family_pick(names, t, "cuda_gemv") == "cuda_gemv" and family_pick(names, t, "other") is None


def test_the_table_serves_the_default_config_within_the_margin(monkeypatch):
    """PathTable: the fastest single call being a config variant within VARIANT_MARGIN (12.5%) of the default config, the
    default is served; a variant twice as fast is."""
    from compress.runtime.paths import PathTable

    monkeypatch.delenv("COMPRESS_PATH_FORCE", raising=False)
    monkeypatch.delenv("COMPRESS_PATH_PREFER", raising=False)

    def choice(cands):
        table = PathTable()
        table.measure_on_cpu, table.cpu_samples = True, 5
        table.run(("k",), cands, torch.device("cpu"))
        return table.choice[("k",)]

    # Host-clock medians of sleeps: 2 ms of 5% against the 12.5% margin, so a loaded CI machine does not flip them.
    assert choice([("cuda_ws_gemv", _sleeper(42)), ("cuda_ws_gemv#9", _sleeper(40))]) == "cuda_ws_gemv"
    assert choice([("cuda_ws_gemv", _sleeper(80)), ("cuda_ws_gemv#9", _sleeper(40))]) == "cuda_ws_gemv#9"


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
