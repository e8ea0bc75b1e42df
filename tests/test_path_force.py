"""COMPRESS_PATH_FORCE (compress/runtime/paths.py): the switch same-process A/B runs of a decode step use to put a
path into the CUDA graph whatever its cold single-call time (bench/results/h100/e2e/session11/)."""

import torch


def test_forced_path_wins_where_it_runs_and_matches(monkeypatch):
    """COMPRESS_PATH_FORCE (A/B runs) takes a named candidate over a faster one, but never one that failed."""
    import time

    from compress.runtime.paths import PathTable

    table = PathTable()
    table.measure_on_cpu = True
    x = torch.ones(4)

    def slow():
        time.sleep(0.01)
        return x * 2

    def broken():
        raise RuntimeError("no kernel here")

    cands = [("fast", lambda: x * 2), ("slow", slow), ("broken", broken)]
    monkeypatch.setenv("COMPRESS_PATH_FORCE", "broken,slow")
    table.run(("k", 1, 1, 1, "f"), cands, torch.device("cpu"))
    assert table.choice[("k", 1, 1, 1, "f")] == "slow"
    monkeypatch.delenv("COMPRESS_PATH_FORCE")
    table.run(("k2", 1, 1, 1, "f"), cands, torch.device("cpu"))
    assert table.choice[("k2", 1, 1, 1, "f")] == "fast"
