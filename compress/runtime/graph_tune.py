"""Choose a decode step's paths by timing the step itself (`compress bench e2e --tune-paths`).

Why (session 32, bench/results/h200/kernels_s32/README.md): `compress.runtime.paths.PathTable` ranks a layer's
candidates by cold single calls, each after overwriting L2. Inside a decode step's CUDA graph the launches overlap
(programmatic dependent launch) and the ranking can differ. On the H200, every int4 layer on the warp-specialized GEMV
decoded Llama-3-8B at 1.805 ms TPOT, while the single-call picks (within 6% of each other) gave 1.904 ms.

`tune_decode_paths` takes a Generator whose step the path table has already measured (after `warmup`). For each key
the decode step serves (M = the batch; recorded over one more warm-up, so that keys measured elsewhere, e.g. by the
benchmark's per-layer checks on unfused layers, cost no trials) with more than one candidate that ran, matched, and
took at most `within` times the fastest single call (the in-graph effects measured so far are a few %; a candidate
ten times slower, e.g. dequantize + cuBLAS at one token, would only cost a slow trial), it serves each such candidate
in turn, the other keys as they are. Each trial re-captures the graphs and times a whole generation, and the key keeps
the fastest TPOT: coordinate descent in the table's key order, a second pass where the first changed a choice (at most
`passes`). The table's choices change in place (every later engine of the process follows them), and the generator is
left warmed up and captured on them.

Why a second pass: a key's best path depends on its neighbours' (launches overlap under PDL). Session 34 (H200, the WS
GEMV's measured configs dropped, synthetic Llama-3-8B W4A16, bench/results/h200/kernels_s34/README.md): one pass tuned
the o projection first, while q/k/v still ran a config that session 33 measured 7% slower in the graph, kept the CUDA
GEMV there, and never re-timed it after q/k/v changed; it ended at 1.854 ms TPOT, against 1.810 with the measured
configs (the WS GEMV at every int4 shape).
"""

from __future__ import annotations

import torch

from compress.runtime.generate import Generator
from compress.runtime.paths import TABLE, PathTable


WITHIN = 1.5  # candidates served: single call at most this many times the fastest's
PASSES = 2  # passes of coordinate descent at most (another only where the last changed a choice)


def decode_keys(table: PathTable, batch: int, within: float = WITHIN, used: set | None = None) -> list[tuple]:
    """The measured keys of one decode step of `batch` rows (M = batch) with at least two candidates to serve; only
    those in `used` when given (the keys a warm-up served, PathTable.recording)."""
    return [k for k, t in table.timings.items() if len(k) > 3 and k[3] == batch and (used is None or k in used)
            and len(runnable(table, k, within)) > 1]


def runnable(table: PathTable, key: tuple, within: float = WITHIN) -> list[str]:
    """Candidates of `key` that ran and matched the first (the timings' numeric entries) with a single call at most
    `within` times the fastest's, in the table's order."""
    t = {n: v for n, v in table.timings.get(key, {}).items() if isinstance(v, (int, float))}
    return [n for n, v in t.items() if v <= within * min(t.values())] if t else []


def _tpot_ms(gen: Generator, ids: torch.Tensor) -> float:
    gen.warmup(ids)  # the eager steps follow the table's current choices; then the graphs are captured again
    return gen.run(ids).tpot_s * 1e3


def tune_decode_paths(gen: Generator, ids: torch.Tensor, table: PathTable = TABLE, log=print,
                      within: float = WITHIN, passes: int = PASSES) -> list[dict]:
    """Serve each decode key's candidates in turn and keep the one with the fastest TPOT (see the module docstring).

    Returns one entry per tuned key and pass: {"key", "pass" (1, 2, ...), "before" (the choice the pass found: in pass 1
    the single-call pick), "chosen", "tpot_ms" {candidate: ms}}."""
    if gen.output_len < 2:
        return []
    with table.recording() as used:
        gen.warmup(ids)
    keys = decode_keys(table, gen.batch, within, used)
    out = []
    for p in range(1, passes + 1):
        changed = False
        for key in keys:
            before = table.choice.get(key)
            trial = {}
            for name in runnable(table, key, within):
                table.choice[key] = name
                trial[name] = _tpot_ms(gen, ids)
            best = min(trial, key=trial.get)
            table.choice[key] = best
            changed |= best != before
            out.append({"key": [str(k) for k in key], "pass": p, "before": before, "chosen": best,
                        "tpot_ms": {n: round(t, 4) for n, t in trial.items()}})
            log(f"  tuned (pass {p}) {key[0]} {key[1]}x{key[2]} M={key[3]}: {before} -> {best} "
                f"({', '.join(f'{n} {t:.3f}' for n, t in trial.items())} ms TPOT)")
        if not changed:
            break
    gen.warmup(ids)
    return out
