"""Session 39: where an eager decode step spends its host time. Synthetic Llama-3-8B (compress.bench.e2e_synthetic) in
each format of PROFILE_FORMATS (default fp16,w4a16), the fast engine without CUDA graphs (what
`compress bench e2e --no-cuda-graphs` runs): wall time per decode step over STEPS steps (synchronized at the end),
then the same steps under cProfile, top functions by own time and by cumulative time -> OUT.json + printed.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s39/eager_profile.py OUT.json
"""
from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/eager_profile.json"
FORMATS = os.environ.get("PROFILE_FORMATS", "fp16,w4a16").split(",")
STEPS = int(os.environ.get("PROFILE_STEPS", "40"))


def steps_ms(gen, n):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        gen._decode_step()
    torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t) / n


def main():
    from compress.bench.e2e_synthetic import build_synthetic
    from compress.runtime.generate import Generator
    res = {"device": torch.cuda.get_device_name(), "steps": STEPS, "formats": {}}
    for fmt in FORMATS:
        model = build_synthetic("llama-3-8b", fmt, "cuda")
        gen = Generator(model, 1, 128, STEPS * 3 + 8, engine="fast", cuda_graphs=False)
        ids = torch.randint(0, 1000, (1, 128), device="cuda")
        gen.warmup(ids, decode_steps=3)
        gen.engine.reset()
        gen._prefill_step()
        walls = [steps_ms(gen, STEPS) for _ in range(2)]
        prof = cProfile.Profile()
        prof.enable()
        prof_ms = steps_ms(gen, STEPS)
        prof.disable()
        out = {}
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(35)
            out[key] = s.getvalue()
        res["formats"][fmt] = {"step_ms": walls, "profiled_step_ms": prof_ms, **out}
        print(f"== {fmt}: eager decode step {walls} ms (under cProfile {prof_ms:.2f} ms)", flush=True)
        print(out["tottime"][:6000], flush=True)
        with open(OUT, "w") as f:
            json.dump(res, f, indent=1)
        del gen, model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
