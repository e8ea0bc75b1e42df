"""Session 12: the per-shape Triton tiles of bucket 16 (M = 2..16) were picked at M = 16; this times them below 16
tokens against session 11's tables (e2e_ab.old_config), beside the CUDA GEMV the runtime can take instead.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s12/ab_small_m.py OUT
Shapes: the Llama-3-8B layers the runtime serves (fused q/k/v and gate/up, o, down) and the 70B ones; M in AB_MS.
All by compress.bench.kernel_timing.call_ms (rotate), each call checked against w4a16_linear_ref first.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_ab import old_config  # noqa: E402

from compress.bench import kernel_timing as kt  # noqa: E402
from kernels import w4a16_cuda  # noqa: E402
from kernels.cases import make_int4, rel_err  # noqa: E402
from kernels.w4a16 import _config, _launch, w4a16_linear_ref  # noqa: E402

SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192), (57344, 8192),
          (8192, 28672)]
MS = tuple(int(v) for v in os.environ.get("AB_MS", "2,4,8,12,16").split(","))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    rows = []
    for n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w16 = torch.randn(n, k, device="cuda").half()
        for m in MS:
            x = torch.randn(m, k, device="cuda").half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"])
            r = {"n": n, "k": k, "m": m, "fp16": 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w16)}
            name, waves, cluster, _ = w4a16_cuda.default_config(m, n, k)
            calls = {"old": lambda p_: _launch(x, p_["qweight"], p_["scales"], None, 128, old_config(m, n, k)),
                     "new": lambda p_: _launch(x, p_["qweight"], p_["scales"], None, 128, _config(m, n, k)),
                     "cuda": lambda p_: w4a16_cuda._launch(x, p_["qweight"], p_["scales"], None, 128, name=name,
                                                           waves=waves, cluster=cluster)}
            for key, call in calls.items():
                r[key] = 1000 * kt.call_ms(call, p) if rel_err(call(p), want) < 2e-3 else float("inf")
            r["same_cfg"] = old_config(m, n, k) == {**_config(m, n, k), "round": 1}
            rows.append(r)
            before, after = min(r["old"], r["cuda"]), min(r["new"], r["cuda"])
            print(f"[{time.time() - t0:5.1f} s] {n}x{k} M={m}: fp16 {r['fp16']:.2f} | triton old {r['old']:.2f} new "
                  f"{r['new']:.2f} | cuda {r['cuda']:.2f} | served before {before:.2f} after {after:.2f} "
                  f"({before / after:.3f}x){' same config' if r['same_cfg'] else ''}", flush=True)
    with open(f"{out}/ab_small_m.json", "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
