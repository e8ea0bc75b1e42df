"""Session 40: eager decode steps (the fast engine without CUDA graphs, synthetic Llama-3-8B, batch 1), arms in turns
in one process so that the host's speed is the same for all: fp16, W8A8, W4A16 as it is now (the warp-specialized
GEMV through each layer's prepared launch, kernels.w4a16_ws.PreparedGemv), and W4A16 with the launch of session 39
(compress.runtime.formats_compress.Int4Linear.ws_gemv swapped for the public launcher, w4a16_ws_gemv, as before).
The WS GEMV is the only W4A16 kernel of a batch-1 decode step on the H200 (session 39, eager_ab.py).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s40/eager_ab.py OUT.json   (AB_ROUNDS, AB_STEPS)
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/eager_ab.json"
ROUNDS = int(os.environ.get("AB_ROUNDS", "5"))
STEPS = int(os.environ.get("AB_STEPS", "30"))


def main():
    from compress.bench.e2e_synthetic import build_synthetic
    from compress.runtime.formats_compress import Int4Linear
    from compress.runtime.generate import Generator
    from compress.runtime.qlinear import QuantLinear

    dev = torch.device("cuda")
    prepared = Int4Linear.ws_gemv

    def launcher(self, x2d, config=None):  # session 39's path: the public launcher, every check on every call
        return self.cuda_path(x2d, "w4a16_ws", "w4a16_ws_gemv", **({} if config is None else {"config": config}))

    def use(old: bool):
        Int4Linear.ws_gemv = launcher if old else prepared
        for m in gens["w4a16"].model.modules():  # the layers' cached paths hold the bound method: look it up again
            if isinstance(m, QuantLinear):
                m._chosen_paths.clear()

    gens = {}
    for fmt in ("fp16", "w8a8", "w4a16"):
        model = build_synthetic("llama-3-8b", fmt, dev)
        gen = Generator(model, 1, 128, ROUNDS * 2 * (STEPS + 1) + 16, engine="fast", cuda_graphs=False)
        gen.warmup(torch.randint(0, 1000, (1, 128), device=dev), decode_steps=3)
        gen.engine.reset()
        gen._prefill_step()
        gens[fmt] = gen
    arms = {"fp16": ("fp16", False), "w8a8": ("w8a8", False), "w4a16 prepared": ("w4a16", False),
            "w4a16 session-39 launch": ("w4a16", True)}
    res = {"device": torch.cuda.get_device_name(), "steps": STEPS, "rounds": ROUNDS, "ms": {a: [] for a in arms}}
    for old in (True, False):  # warm both paths once
        use(old)
        for _ in range(3):
            gens["w4a16"]._decode_step()
    for r in range(ROUNDS):
        for arm, (fmt, old) in arms.items():
            use(old)
            gen = gens[fmt]
            gen._decode_step()  # re-caches the layers' paths outside the timed steps
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(STEPS):
                gen._decode_step()
            torch.cuda.synchronize()
            res["ms"][arm].append(1000 * (time.perf_counter() - t) / STEPS)
        print(f"round {r}: " + ", ".join(f"{a} {v[-1]:.2f}" for a, v in res["ms"].items()), flush=True)
    use(False)
    res["median_ms"] = {a: statistics.median(v) for a, v in res["ms"].items()}
    print("median ms a decode step: " + ", ".join(f"{a} {v:.2f}" for a, v in res["median_ms"].items()), flush=True)
    with open(OUT, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
