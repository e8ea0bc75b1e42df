"""Session 35: the WS GEMV's CUDA-core consumer with a chunk's four words summed in a tree (build "tree",
-DW4WS_TREE=1: a dependent chain of 4 HFMA2 + 2 HADD2 a chunk) against the shipped build (16 HFMA2 in one chain), as
single calls under the kernel tables' rotate timing (compress.bench.kernel_timing.checked_call_us: checked against
kernels.w4a16.w4a16_linear_ref and for the same bytes on a second call, then timed), per layer shape and config, fp16
F.linear beside them.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s35/tree_ab.py OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_ws
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

SHAPES = [("8B q/o", 4096, 4096), ("8B k/v", 1024, 4096), ("8B gate/up", 14336, 4096), ("8B down", 4096, 14336),
          ("70B q/o", 8192, 8192), ("70B k/v", 1024, 8192), ("70B gate/up", 28672, 8192), ("70B down", 8192, 28672),
          ("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096)]
BUILDS = ("ws", "tree")


def main() -> None:
    out_path = sys.argv[1]
    gpu = torch.cuda.get_device_name()
    rows = []
    for name, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k)).half()
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        fp16 = 1000 * kt.call_ms(lambda w: F.linear(x, w), w)
        served = w4a16_ws.config_for(n, k, gpu)
        configs = sorted({served, 0, 7, 9})
        row = {"shape": name, "N": n, "K": k, "fp16_us": fp16, "served_config": served, "us": {}}
        for c in configs:
            for b in BUILDS:
                os.environ["COMPRESS_W4A16_WS_BUILD"] = b
                r = kt.checked_call_us(lambda p: w4a16_ws._launch(x, p["qweight"], p["scales"], None, 128, config=c), p,
                                       want)
                row["us"][f"{b} c{c}"] = r
        os.environ.pop("COMPRESS_W4A16_WS_BUILD", None)
        cells = "  ".join(f"c{c} {row['us'][f'ws c{c}']['us']:6.2f} -> {row['us'][f'tree c{c}']['us']:6.2f}"
                          for c in configs)
        print(f"{name:17s} fp16 {fp16:7.2f}  served c{served}  {cells}", flush=True)
        rows.append(row)
        del p, w
        with open(out_path, "w") as f:
            json.dump({"device": gpu, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
