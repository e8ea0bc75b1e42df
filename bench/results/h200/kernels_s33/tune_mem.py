"""Session 33: where `compress bench e2e --tune-paths` gets its extra ~1 GB of peak GPU memory (call 1: 7.29 GB
against 6.31 GB without tuning, synthetic Llama-3-8B W4A16 decode_bound).

Prints torch.cuda.memory_allocated after the first warm-up, after every tuning trial, after gc.collect(), and the
peak of one timed run before and after tuning.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s33/tune_mem.py
"""

from __future__ import annotations

import gc

import torch

from compress.bench.e2e_measure import prompt_ids
from compress.bench.e2e_synthetic import build_synthetic
from compress.runtime import graph_tune
from compress.runtime.generate import Generator


def gb(x: int) -> str:
    return f"{x / 1e9:.3f} GB"


def peak_of_run(gen, ids) -> str:
    torch.cuda.reset_peak_memory_stats()
    gen.run(ids)
    return gb(torch.cuda.max_memory_allocated())


def main() -> None:
    model = build_synthetic("llama-3-8b", "w4a16", "cuda", seed=0)
    print("model built:", gb(torch.cuda.memory_allocated()), flush=True)
    ids = prompt_ids(model.config.vocab_size, 1, 256, 0, torch.device("cuda"))
    gen = Generator(model, 1, 256, 512, engine="fast", cuda_graphs=True)
    gen.warmup(ids)
    print("after warmup:", gb(torch.cuda.memory_allocated()), "run peak", peak_of_run(gen, ids), flush=True)
    orig = graph_tune._tpot_ms

    def traced(g, i):
        t = orig(g, i)
        print(f"    trial {t:.3f} ms  allocated {gb(torch.cuda.memory_allocated())}", flush=True)
        return t

    graph_tune._tpot_ms = traced
    graph_tune.tune_decode_paths(gen, ids, log=lambda s: print(s, flush=True))
    print("after tuning:", gb(torch.cuda.memory_allocated()), "run peak", peak_of_run(gen, ids), flush=True)
    gc.collect()
    print("after gc.collect:", gb(torch.cuda.memory_allocated()), "run peak", peak_of_run(gen, ids), flush=True)
    gen.warmup(ids)
    print("after another warmup:", gb(torch.cuda.memory_allocated()), "run peak", peak_of_run(gen, ids), flush=True)


if __name__ == "__main__":
    main()
