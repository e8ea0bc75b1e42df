"""Session 36: the warp-specialized W4A16 GEMM's split of K with the cluster reduction (the chunks of a row group run
as one thread-block cluster and add their sums through distributed shared memory) against the same launch on the
workspace (session 31's reduction, a fence and an atomic per row group in the consumers' path), the served tensor-core
GEMV and fp16, per layer shape, token count and config, one process. Rotate timing
(compress.bench.kernel_timing.checked_call_us: every arm checked against kernels.w4a16.w4a16_linear_ref and for the
same bytes on a second call, then timed); the two reductions also compared for the same bytes.

Usage (repository root, GPU machine):
  python3 bench/results/h200/kernels_s36/cluster_ab.py OUT_JSON   # AB_CONFIGS (default all) x layers x AB_M
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda, w4a16_ws_gemm as wsm
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

SHAPES = [("8B q/o", 4096, 4096), ("8B k/v", 1024, 4096), ("8B gate/up", 14336, 4096), ("8B down", 4096, 14336),
          ("70B q/o", 8192, 8192), ("70B k/v", 1024, 8192), ("70B gate/up", 28672, 8192), ("70B down", 8192, 28672),
          ("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096)]
DEV = torch.device("cuda")


def main(out_path: str) -> None:
    configs = [int(c) for c in os.environ.get("AB_CONFIGS", "").split()] or list(range(len(wsm.CONFIGS)))
    ms = [int(m) for m in os.environ.get("AB_M", "16 9 8").split()]
    only = os.environ.get("AB_SHAPES", "")
    print(f"{torch.cuda.get_device_name()}; configs {configs}; M {ms}", flush=True)
    rows = []
    for name, n, k in SHAPES:
        if only and name not in only.split(","):
            continue
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k + m)).half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
            fp16 = 1000 * kt.call_ms(lambda w: F.linear(x, w), w)
            served = kt.checked_call_us(lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], 128),
                                        p, want)
            row = {"shape": name, "N": n, "K": k, "M": m, "fp16_us": fp16, "served_us": served["us"],
                   "served_plan": w4a16_cuda.planned(n, k, m), "cluster": {}, "workspace": {}, "same_bytes": {}}
            for c in configs:
                arms = [("cluster", True)] + ([("workspace", False)] if wsm.clustered(m, k, c, True) else [])
                outs = {}
                for arm, cl in arms:
                    if not wsm.fits(m, k, c, 128, False, DEV, cluster=cl):
                        continue
                    call = lambda p, c=c, cl=cl: wsm._launch(x, p["qweight"], p["scales"], p["zeros"], 128, c,
                                                             cluster=cl)
                    row[arm][wsm.describe(c)] = kt.checked_call_us(call, p, want)["us"]
                    outs[arm] = call(p)
                if len(outs) == 2:
                    row["same_bytes"][wsm.describe(c)] = bool(torch.equal(outs["cluster"], outs["workspace"]))
            line = f"{name:17s} M={m:2d} fp16 {fp16:7.2f} served {served['us']:7.2f} ({row['served_plan']})"
            for arm in ("cluster", "workspace"):
                if row[arm]:
                    best = min(row[arm], key=row[arm].get)
                    line += f"  {arm} best {row[arm][best]:7.2f} ({best.replace('cuda ws gemm ', '')})"
            print(line, flush=True)
            split = "  ".join(f"{a.replace('cuda ws gemm ', '')} {row['cluster'][a]:.2f}/{row['workspace'][a]:.2f}"
                              for a in row["workspace"] if a in row["cluster"])
            if split:
                print(f"    cluster/workspace: {split}", flush=True)
            if not all(row["same_bytes"].values()):
                print(f"    DIFFERENT BYTES: {row['same_bytes']}", flush=True)
            rows.append(row)
            with open(out_path, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1, default=str)
        del p, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
