"""Session 14: why compress.runtime's path table timed the W8A8 kernel at 2161 us on 8B k/v at 32 tokens (call 4's
kernel table; the rotating timing gave 7.6 us) and so chose torch._int_mm. Times the table's own single-call method
(PathTable._time_once: L2 flushed, ~1 ms spin, one call between CUDA events) sample by sample on that layer and
neighbours, for the served config and variants (no PDL, no split-K).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s14/pathtable_probe.py
"""

from __future__ import annotations

import torch

from compress.runtime.paths import PathTable
from kernels.cases import make_w8a8
from kernels.w8a8 import _config, _launch

CASES = [(32, 1024, 4096), (32, 4096, 4096), (32, 1024, 8192), (64, 1024, 4096), (8, 1024, 4096)]


def main():
    table = PathTable()
    for m, n, k in CASES:
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        x = torch.randn(m, k, device="cuda").half()
        served = _config(m, n, k, 132)
        arms = {"served": served, "nopdl": dict(served, pdl=0), "split1": dict(served, fit=None, split=1),
                "nopdl_split1": dict(served, pdl=0, fit=None, split=1)}
        for name, cfg in arms.items():
            fn = lambda c=cfg: _launch(x, wq, ws, c)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            samples = [table._time_once(fn, torch.device("cuda")) * 1e3 for _ in range(7)]
            print(f"M={m} {n}x{k} {name:13s} us: " + " ".join(f"{s:.1f}" for s in samples), flush=True)


if __name__ == "__main__":
    main()
