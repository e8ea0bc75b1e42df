"""`compress bench e2e --tune-paths` (compress/runtime/graph_tune.py): a decode step's paths chosen by timing the step.
On a CPU the path table measures with the host clock (`measure_on_cpu`) and the GPU's candidates run in Triton's
interpreter: the same selection loop as on a GPU, where the step is a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from compress.runtime import graph_tune
from compress.runtime.generate import Generator
from compress.runtime.paths import TABLE
from tests.conftest import needs_triton
from tests.conftest import triton_interpreter_works  # noqa: F401 (the skip condition names it)
from tests.test_runtime_fastpath import _tiny


@pytest.fixture
def measured_tiny_step(monkeypatch):
    """(model, gen, ids): a tiny fp16 Llama's decode Generator (batch 1, 6 prompt tokens, 2 out), warmed up with the
    path table measuring on the CPU (host clock, Triton's interpreter); the table is cleared before and after."""
    model = _tiny("llama").half()
    ids = torch.randint(0, 300, (1, 6), generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(TABLE, "measure_on_cpu", True)
    TABLE.clear()
    try:
        gen = Generator(model, 1, 6, 2, engine="fast")
        gen.warmup(ids)
        yield model, gen, ids
    finally:
        TABLE.clear()


@needs_triton
def test_each_candidate_is_served_in_turn_and_the_fastest_kept(monkeypatch, measured_tiny_step):
    _, gen, ids = measured_tiny_step
    # The default cut serves the candidates within WITHIN (1.5x) of the fastest single call. Interpreted on a CPU the
    # Triton candidates take 30-200x torch's, so here every candidate is served (within = inf). (The cut is checked
    # against the recorded timings, not against a count: host-clock timings on a loaded machine move.)
    inf = float("inf")
    keys = graph_tune.decode_keys(TABLE, 1, inf)
    assert set(graph_tune.decode_keys(TABLE, 1)) <= set(keys)
    assert {k[0] for k in keys} >= {"dense"}  # the fp16 layers' GEMV candidates at M = 1
    assert all(k[3] == 1 for k in keys) and not graph_tune.decode_keys(TABLE, 2, inf)
    for k in keys:
        t, names = TABLE.timings[k], graph_tune.runnable(TABLE, k, inf)
        fastest, cut = min(names, key=t.get), graph_tune.runnable(TABLE, k)
        assert fastest in cut and set(cut) <= set(names)
        assert all((t[n] <= graph_tune.WITHIN * t[fastest]) == (n in cut) for n in names)
    served = []
    timed = graph_tune._tpot_ms

    def watch(g, i):  # the real trial, recording what each key served during it
        served.append({k: TABLE.choice[k] for k in keys})
        return timed(g, i)

    monkeypatch.setattr(graph_tune, "_tpot_ms", watch)
    picks = {k: TABLE.choice[k] for k in keys}
    # A key measured outside the decode step (as the benchmark's per-layer checks do on unfused layers) has
    # candidates at M = 1 too, but the step never serves it: it costs no trial.
    x = torch.ones(4)
    TABLE.run(("dense", 4, 4, 1, "elsewhere"), [("a", lambda: x * 1), ("b", lambda: x * 1)], torch.device("cpu"))
    assert ("dense", 4, 4, 1, "elsewhere") in graph_tune.decode_keys(TABLE, 1, inf)
    tuned = graph_tune.tune_decode_paths(gen, ids, log=lambda msg: None, within=inf, passes=1)
    assert [tuple(t["key"]) for t in tuned] == [tuple(map(str, k)) for k in keys]
    trial = 0
    for k, t in zip(keys, tuned):
        names = graph_tune.runnable(TABLE, k, inf)
        assert list(t["tpot_ms"]) == names and len(names) > 1 and t["before"] == picks[k]
        for name in names:  # this key served each candidate once; the keys before it kept their tuned choice
            assert served[trial][k] == name
            assert all(served[trial][j] == tj["chosen"] for j, tj in zip(keys, tuned[: keys.index(k)]))
            trial += 1
        assert t["chosen"] == min(t["tpot_ms"], key=t["tpot_ms"].get) == TABLE.choice[k]
    assert trial == len(served)
    assert gen.run(ids).tokens.shape == (1, 2)  # left warmed up on the tuned choices
    # The e2e report's table of them.
    from compress.bench.e2e_measure import WorkloadResult
    from compress.bench.e2e_report import tuned_table

    md = tuned_table([WorkloadResult("tiny", "smoke", 1, 6, 2, tuned=tuned)])
    assert md.startswith("## Paths tuned inside the decode step") and md.count("| `tiny` | smoke | ") == len(keys)
    assert f"| {tuned[0]['before']} | {tuned[0]['chosen']} |" in md


@needs_triton
def test_a_second_pass_retimes_a_key_after_its_neighbour_changed(monkeypatch, measured_tiny_step):
    """Two keys whose best paths depend on each other (as launches overlapping under PDL make them): pass 1 keeps the
    first key's path that is best next to the second's single-call pick, then changes the second; pass 2 re-times the
    first and changes it; a pass that changes nothing ends the descent. The TPOT of each trial comes from a table of
    the two keys' choices (the descent's logic, not the timing, is under test; the test above times real trials)."""
    _, gen, ids = measured_tiny_step
    inf = float("inf")
    keys = graph_tune.decode_keys(TABLE, 1, inf)[:2]
    assert len(keys) == 2
    a, b = keys
    # Two candidates each (the first two that ran), the others served by no trial.
    cand = {k: graph_tune.runnable(TABLE, k, inf)[:2] for k in keys}
    monkeypatch.setattr(graph_tune, "decode_keys", lambda *args, **kw: keys)
    monkeypatch.setattr(graph_tune, "runnable", lambda table, k, within=None: cand[k])
    (a0, a1), (b0, b1) = cand[a], cand[b]
    TABLE.choice[a], TABLE.choice[b] = a0, b0
    tpot = {(a0, b0): 2.0, (a1, b0): 2.1, (a0, b1): 1.9, (a1, b1): 1.8}
    monkeypatch.setattr(graph_tune, "_tpot_ms", lambda g, i: tpot[(TABLE.choice[a], TABLE.choice[b])])
    tuned = graph_tune.tune_decode_paths(gen, ids, log=lambda msg: None, within=inf, passes=3)
    got = [(t["pass"], t["before"], t["chosen"]) for t in tuned]
    assert got == [(1, a0, a0), (1, b0, b1), (2, a0, a1), (2, b1, b1), (3, a1, a1), (3, b1, b1)]
    assert (TABLE.choice[a], TABLE.choice[b]) == (a1, b1)
    TABLE.choice[a], TABLE.choice[b] = a0, b0
    once = graph_tune.tune_decode_paths(gen, ids, log=lambda msg: None, within=inf, passes=1)
    assert [t["pass"] for t in once] == [1, 1] and (TABLE.choice[a], TABLE.choice[b]) == (a0, b1)


def test_nothing_to_tune_without_a_decode_step():
    model = _tiny("llama")
    gen = Generator(model, 1, 4, 1, engine="fast")
    assert graph_tune.tune_decode_paths(gen, torch.zeros(1, 4, dtype=torch.long)) == []
