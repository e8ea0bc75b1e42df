"""Session 32: where the W4A16 decode step's time goes inside the CUDA graph (synthetic Llama-3-8B, batch 1).

A diagnostic, not a benchmark of a usable model: each arm removes one kind of launch from the decode step
(the outputs of that arm are wrong; only its TPOT is read), so the TPOT difference against the base arm is what
those launches cost inside the graph, where programmatic dependent launch overlaps neighbours and an eager
profile's per-kernel times do not add up. Arms, in one process on one model:
  base     the step as `compress bench e2e` runs it
  nosilu   the down projection reads gate's half of [gate | up] (no silu * up launch)
  noattn   decode attention returns q (no split / combine launches, no cache write)
  nonorm   residual add + RMSNorm return their input (no add_rms_norm launches)
  noglue   all three
  nohead   + lm_head returns a preallocated logits buffer (the GEMVs of the 32 layers alone)
  attn1    decode attention forced to its one-launch kernel (DecodeAttention(..., one_launch=True))
  attn2    forced to the split + combine launches
  force:P  the base step with COMPRESS_PATH_FORCE=P (compress.runtime.paths: these paths wherever offered, e.g. one
           family of int4 GEMVs for every layer)
  prefer:S the base step with COMPRESS_PATH_PREFER=S ("prefer:" = no preferred path)
  pfN      the base step with COMPRESS_DECODE_L2_PREFETCH_MB=N (the int4 GEMVs' L2 prefetch of the next layer's first
           N MB of weights, kernels/csrc/l2_prefetch.cuh; pf0 = off)
Then the base arm again, with a torch.profiler table of 4 replays of its decode graph (kernel times inside the graph).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s32/ablate.py OUT_JSON [ARMS...]
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

from compress.bench.e2e_measure import prompt_ids
from compress.bench.e2e_synthetic import build_synthetic
from compress.runtime import fastpath
from compress.runtime.decode_kernels import DecodeAttention
from compress.runtime.generate import Generator
from compress.runtime.paths import TABLE

ARMS = ("base", "nosilu", "noattn", "nonorm", "noglue", "nohead")
IN_LEN, OUT_LEN, RUNS = 256, 256, 5
# ABLATE_KEEP_PATHS=1: every arm runs the paths the first arm's table measured (arms that change a path's launch, like
# the pfN ones, then differ by that alone; otherwise each arm re-times its paths, whose picks move by a few %).
KEEP_PATHS = os.environ.get("ABLATE_KEEP_PATHS") == "1"


class _Logits(torch.nn.Module):
    def __init__(self, rows: int, vocab: int, like: torch.Tensor):
        super().__init__()
        self.register_buffer("y", torch.zeros(rows, vocab, dtype=like.dtype, device=like.device))

    def forward(self, h):
        return self.y


def arm(model, name: str, with_profile: bool = False) -> dict:
    saved = (fastpath.FastLM._silu_mul_fn, DecodeAttention.__call__, fastpath.FastLM._add_norm)
    glue = name in ("noglue", "nohead")
    if name == "nosilu" or glue:
        fastpath.FastLM._silu_mul_fn = lambda self, gu: (lambda g: g[..., : g.shape[-1] // 2])
    if name == "noattn" or glue:
        DecodeAttention.__call__ = lambda self, q, *a, **kw: q
    if name == "nonorm" or glue:
        fastpath.FastLM._add_norm = lambda self, x, y, w, quant=False: (x, x, None)
    if name in ("attn1", "attn2"):
        call = saved[1]
        DecodeAttention.__call__ = lambda self, *a, one_launch=False, **kw: call(self, *a, one_launch=name == "attn1", **kw)
    if name.startswith("pf"):
        os.environ["COMPRESS_DECODE_L2_PREFETCH_MB"] = name[2:]
    if name.startswith("force:"):
        os.environ["COMPRESS_PATH_FORCE"] = name[6:]
    if name.startswith("prefer:"):
        os.environ["COMPRESS_PATH_PREFER"] = name[7:]
    try:
        if not KEEP_PATHS:
            TABLE.clear()
        ids = prompt_ids(model.config.vocab_size, 1, IN_LEN, 0, torch.device("cuda"))
        gen = Generator(model, 1, IN_LEN, OUT_LEN, engine="fast", cuda_graphs=True)
        if name == "nohead":
            lm = gen.engine.lm
            lm.lm_head = _Logits(1, model.config.vocab_size, lm.final_norm)
        gen.warmup(ids)
        tpots = [gen.run(ids).tpot_s * 1e3 for _ in range(RUNS)]
        out = {"arm": name, "tpot_ms": statistics.median(tpots), "runs": tpots, "graphs": gen.graph_note,
               "l2_hints": getattr(gen.engine.lm, "l2_hints", None),
               "paths": {" ".join(map(str, k[:4])): v for k, v in TABLE.choice.items()}}
        print(f"{name:8s} TPOT {out['tpot_ms']:.3f} ms  runs {' '.join(f'{t:.3f}' for t in tpots)}  graphs "
              f"{gen.graph_note}  L2 hints {out['l2_hints']}", flush=True)
        print("    " + "; ".join(f"{k}: {v}" for k, v in out["paths"].items()), flush=True)
        if with_profile:
            out["profile"] = graph_profile(gen, ids)
        return out
    finally:
        os.environ.pop("COMPRESS_DECODE_L2_PREFETCH_MB", None)
        os.environ.pop("COMPRESS_PATH_FORCE", None)
        os.environ.pop("COMPRESS_PATH_PREFER", None)
        fastpath.FastLM._silu_mul_fn, DecodeAttention.__call__, fastpath.FastLM._add_norm = saved


def graph_profile(gen: Generator, ids: torch.Tensor) -> str:
    from torch.profiler import ProfilerActivity, profile

    if gen.g_decode is None:
        return "no decode graph"
    # From a fresh prefill, as run() does: the step counter indexes the token buffer.
    gen.ids.copy_(ids)
    gen.engine.reset()
    (gen.g_prefill.replay if gen.g_prefill is not None else gen._prefill_step)()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(4):
            gen.g_decode.replay()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)


def main() -> None:
    out_path = sys.argv[1]
    arms = sys.argv[2:] or list(ARMS)
    model = build_synthetic("llama-3-8b", "w4a16", "cuda", seed=0)
    rows = []
    for a in arms:
        rows.append(arm(model, a))
        with open(out_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "in_len": IN_LEN, "out_len": OUT_LEN, "rows": rows}, f,
                      indent=1)
    # Last (a failure here loses no arm): the base step again, then the profiler over 4 replays of its graph.
    r = arm(model, os.environ.get("ABLATE_PROFILE_ARM", "base"), with_profile=True)
    print(r["profile"], flush=True)
    rows.append(r)
    with open(out_path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "in_len": IN_LEN, "out_len": OUT_LEN, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
