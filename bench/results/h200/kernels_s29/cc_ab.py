"""Session 29: the CUDA-core one-token W4A16 GEMV (kernels/w4a16_cc.py) against the served tensor-core GEMV
(kernels/w4a16_cuda.py, its config for this GPU) and torch fp16 F.linear, per Llama-3 / Qwen3 layer shape, one
process, the kernel table's rotate timing (compress.bench.kernel_timing.checked_call_us: each arm checked against
kernels.w4a16.w4a16_linear_ref and for the same bytes on a second call, then timed). Every CC config, each with
programmatic dependent launch (weights read before the wait, the runtime's default) and with plain launches (AB_PDL),
and since call 8 with and without the persistent grid; the
fastest CC arm and the served GEMV are timed a second time. Formats: fp16 g128 symmetric at every shape; g64 / asym /
bf16 on two shapes (checked and timed with the shape's fastest config).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s29/cc_ab.py OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_cc, w4a16_cuda
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

PDL_MODES = [int(v) for v in os.environ.get("AB_PDL", "2,0").split(",")]  # call 8: AB_PDL=2
SHAPES = [("8B q/o", 4096, 4096), ("8B k/v", 1024, 4096), ("8B gate/up", 14336, 4096), ("8B down", 4096, 14336),
          ("70B q/o", 8192, 8192), ("70B k/v", 1024, 8192), ("70B gate/up", 28672, 8192), ("70B down", 8192, 28672),
          ("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096), ("Qwen3 fused gate_up", 24576, 4096),
          ("Qwen3 down", 4096, 12288)]


def arm(fn, p, want):
    return kt.checked_call_us(fn, p, want)


def main() -> None:
    out_path = sys.argv[1]
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}; served GEMV configs: {w4a16_cuda.config_source(w4a16_cuda.gpu_name(dev))}",
          flush=True)
    results = []
    for name, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k)).half()
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        fp16 = 1000 * kt.call_ms(lambda w: F.linear(x, w), w)
        served = arm(lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], 128), p, want)
        row = {"shape": name, "N": n, "K": k, "fp16_us": fp16, "served": served,
               "served_plan": w4a16_cuda.planned(n, k, 1), "cc": {}}
        arms = {}
        persists = [False, True] if hasattr(w4a16_cc, "persistent") else [False]
        for c in range(len(w4a16_cc.CONFIGS)):
            for pdl in PDL_MODES:
                for ps in persists:
                    kw = {"persist": ps} if len(persists) > 1 else {}
                    arms[(c, pdl, ps)] = arm(lambda p: w4a16_cc._launch(x, p["qweight"], p["scales"], p["zeros"], 128,
                                                                        config=c, pdl=pdl, **kw), p, want)
                    row["cc"][f"{w4a16_cc.describe(c)} pdl{pdl}{' persistent' if ps else ''}"] = arms[(c, pdl, ps)]
        c_best, pdl_best, ps_best = min(arms, key=lambda a: arms[a]["us"])
        best = f"{w4a16_cc.describe(c_best)} pdl{pdl_best}{' persistent' if ps_best else ''}"
        bkw = {"persist": ps_best} if len(persists) > 1 else {}
        row["best"] = best
        row["best_again_us"] = 1000 * kt.call_ms(
            lambda p: w4a16_cc._launch(x, p["qweight"], p["scales"], p["zeros"], 128, config=c_best, pdl=pdl_best, **bkw), p)
        row["served_again_us"] = 1000 * kt.call_ms(
            lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], 128), p)
        print(f"{name:20s} {n:6d} {k:6d} fp16 {fp16:7.2f}  served {served['us']:7.2f} / {row['served_again_us']:7.2f} "
              f"({row['served_plan']})  cc best {row['cc'][best]['us']:7.2f} / {row['best_again_us']:7.2f} ({best}, "
              f"err {row['cc'][best]['err']:.1e})", flush=True)
        print("    " + "  ".join(f"{a.replace('cuda cc gemv ', '')} {r['us']:.2f}" for a, r in row["cc"].items()), flush=True)
        for bad in [a for a, r in row["cc"].items() if r["us"] == float("inf")]:
            print(f"    FAILED {bad}: {row['cc'][bad]}", flush=True)
        if name in ("8B gate/up", "70B down"):
            row["formats"] = {}
            for gs, sym, dt in ((64, True, torch.float16), (128, False, torch.float16), (64, False, torch.float16),
                                (128, True, torch.bfloat16), (64, False, torch.bfloat16)):
                q = make_int4(n, k, gs, sym, dt, "cuda", seed=gs + n)
                xd = x.to(dt)
                wd = w4a16_linear_ref(xd, q["qweight"], q["scales"], q["zeros"], gs)
                tol = 2e-3 if dt == torch.float16 else 1e-2
                r_cc = kt.checked_call_us(lambda q: w4a16_cc._launch(xd, q["qweight"], q["scales"], q["zeros"], gs,
                                                                     config=c_best, pdl=pdl_best, **bkw), q, wd, tol)
                r_sv = kt.checked_call_us(lambda q: w4a16_cuda.w4a16_gemv(xd, q["qweight"], q["scales"], q["zeros"], gs),
                                          q, wd, tol)
                tag = f"g{gs} {'sym' if sym else 'asym'} {str(dt)[6:]}"
                row["formats"][tag] = {"cc": r_cc, "served": r_sv}
                print(f"    {tag:18s} served {r_sv['us']:7.2f} (err {r_sv['err']:.1e})  cc {r_cc['us']:7.2f} "
                      f"(err {r_cc['err']:.1e})", flush=True)
        results.append(row)
        del p, w
        torch.cuda.empty_cache()
        with open(out_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": results}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
