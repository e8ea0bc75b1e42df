"""Session 39: eager decode steps (the fast engine without CUDA graphs, synthetic Llama-3-8B), arms in turns in one
process so that the host's speed is the same for all: fp16, W8A8, W4A16 as it is now, and W4A16 with session 38's
launch of the warp-specialized GEMV (its library, built from a carried copy of its source, kernels/csrc/
w4a16_ws_gemv_s38.cu, and the stream handle from torch.cuda.current_stream): the only W4A16 kernel of a batch-1 decode
step (every fused layer's chosen path, `compress bench e2e`'s paths table). The old arm swaps w4a16_ws.build and
cuda_build.stream_handle for those; nothing else differs.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s39/eager_ab.py OUT.json   (AB_ROUNDS, AB_STEPS)
"""
from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/eager_ab.json"
ROUNDS = int(os.environ.get("AB_ROUNDS", "5"))
STEPS = int(os.environ.get("AB_STEPS", "30"))
OLD_SRC = Path("kernels/csrc/w4a16_ws_gemv_s38.cu")


def main():
    from compress.bench.e2e_synthetic import build_synthetic
    from compress.runtime.generate import Generator
    from kernels import cuda_build, w4a16_ws
    dev = torch.device("cuda")
    new_build, new_stream = w4a16_ws.build, cuda_build.stream_handle
    old_lib = ctypes.CDLL(str(cuda_build.library_path(OLD_SRC, "ws", [], cuda_build.arch(dev))))
    w4a16_ws._bind(old_lib)

    def use(old: bool):
        w4a16_ws.build = (lambda d: old_lib) if old else new_build
        cuda_build.stream_handle = (lambda d: torch.cuda.current_stream(d).cuda_stream) if old else new_stream

    gens = {}
    for fmt in ("fp16", "w8a8", "w4a16"):
        model = build_synthetic("llama-3-8b", fmt, dev)
        gen = Generator(model, 1, 128, ROUNDS * 4 * STEPS + 16, engine="fast", cuda_graphs=False)
        gen.warmup(torch.randint(0, 1000, (1, 128), device=dev), decode_steps=3)
        gen.engine.reset()
        gen._prefill_step()
        gens[fmt] = gen
    arms = {"fp16": ("fp16", None), "w8a8": ("w8a8", None), "w4a16 now": ("w4a16", False),
            "w4a16 session-38 launch": ("w4a16", True)}
    res = {"device": torch.cuda.get_device_name(), "steps": STEPS, "rounds": ROUNDS, "ms": {a: [] for a in arms}}
    use(True)  # warm the old path once
    for _ in range(3):
        gens["w4a16"]._decode_step()
    use(False)
    for r in range(ROUNDS):
        for arm, (fmt, old) in arms.items():
            use(bool(old))
            gen = gens[fmt]
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(STEPS):
                gen._decode_step()
            torch.cuda.synchronize()
            res["ms"][arm].append(1000 * (time.perf_counter() - t) / STEPS)
        use(False)
        print(f"round {r}: " + ", ".join(f"{a} {v[-1]:.2f}" for a, v in res["ms"].items()), flush=True)
    res["median_ms"] = {a: statistics.median(v) for a, v in res["ms"].items()}
    print("median ms a decode step: " + ", ".join(f"{a} {v:.2f}" for a, v in res["median_ms"].items()), flush=True)
    with open(OUT, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
