"""Session 31: the warp-specialized W4A16 GEMM for 2-16 tokens (kernels/csrc/w4a16_ws_gemm.cu: the one-token WS GEMV's
TMA weight ring, consumer warps loading a block's activation fragments once for several 16-row tiles) against the
served tensor-core GEMV (kernels/w4a16_cuda.py) and fp16, per layer shape and token count, one process, the kernel
table's rotate timing (compress.bench.kernel_timing.checked_call_us: every arm checked against
kernels.w4a16.w4a16_linear_ref and for the same bytes on a second call, then timed).

Usage (repository root, GPU machine):
  python3 bench/results/h200/kernels_s31/wsm_ab.py check CONFIG    # one config on small odd shapes, every format, M 1-16
  python3 bench/results/h200/kernels_s31/wsm_ab.py time OUT_JSON   # WSM_CONFIGS (default all) x layers x WSM_M
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda, w4a16_ws_gemm as wsm
from kernels.cases import make_int4, rel_err
from kernels.w4a16 import w4a16_linear_ref

SHAPES = [("8B q/o", 4096, 4096), ("8B k/v", 1024, 4096), ("8B gate/up", 14336, 4096), ("8B down", 4096, 14336),
          ("70B q/o", 8192, 8192), ("70B k/v", 1024, 8192), ("70B gate/up", 28672, 8192), ("70B down", 8192, 28672),
          ("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096)]
DEV = torch.device("cuda")


def check(config: int) -> None:
    bad = skipped = 0
    for n, k in ((64, 512), (40, 200), (8, 4096), (136, 1000), (1024, 4160), (4096, 14336)):
        for gs, sym, dt in ((128, True, torch.float16), (64, True, torch.float16), (128, False, torch.float16),
                            (64, False, torch.bfloat16), (128, True, torch.bfloat16)):
            p = make_int4(n, k, gs, sym, dt, "cuda", seed=n + k + gs)
            for m in (1, 2, 7, 8, 9, 16):
                if not wsm.fits(m, k, config, gs, not sym, DEV):
                    skipped += 1
                    continue
                x = torch.randn(m, k, device="cuda", dtype=dt)
                want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
                for pdl, grid in ((2, 0), (0, 0), (2, 3)):
                    got = wsm._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config, pdl, grid)
                    torch.cuda.synchronize()
                    e = rel_err(got, want)
                    tol = 2e-3 if dt == torch.float16 else 1e-2
                    same = torch.equal(got, wsm._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config, pdl, grid))
                    ok = e < tol and same
                    bad += not ok
                    if not ok:
                        print(f"  FAIL config {config} M={m} N={n} K={k} g{gs} {'sym' if sym else 'asym'} {dt} pdl{pdl} "
                              f"grid{grid}: err {e:.2e} same {same}", flush=True)
    print(f"check config {config} ({wsm.describe(config)}): {'PASS' if not bad else f'{bad} FAILED'} ({skipped} cases "
          "over shared memory, skipped)", flush=True)
    sys.exit(1 if bad else 0)


def time_all(out_path: str) -> None:
    configs = [int(c) for c in os.environ.get("WSM_CONFIGS", "").split()] or list(range(len(wsm.CONFIGS)))
    ms = [int(m) for m in os.environ.get("WSM_M", "2 4 8 16").split()]
    print(f"{torch.cuda.get_device_name()}; configs {configs}; M {ms}", flush=True)
    rows = []
    for name, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k + m)).half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
            fp16 = 1000 * kt.call_ms(lambda w: F.linear(x, w), w)
            served = kt.checked_call_us(lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], 128),
                                        p, want)
            row = {"shape": name, "N": n, "K": k, "M": m, "fp16_us": fp16, "served": served,
                   "served_plan": w4a16_cuda.planned(n, k, m), "wsm": {}}
            for c in configs:
                if wsm.fits(m, k, c, 128, False, DEV):
                    row["wsm"][wsm.describe(c)] = kt.checked_call_us(
                        lambda p: wsm._launch(x, p["qweight"], p["scales"], p["zeros"], 128, c), p, want)
            line = f"{name:18s} M={m:2d} fp16 {fp16:7.2f}  served {served['us']:7.2f} ({row['served_plan']})"
            if row["wsm"]:
                best = min(row["wsm"], key=lambda a: row["wsm"][a]["us"])
                line += f"  wsm best {row['wsm'][best]['us']:7.2f} ({best})"
            print(line, flush=True)
            if row["wsm"]:
                print("    " + "  ".join(f"{a.replace('cuda ws gemm ', '')} {r['us']:.2f}" for a, r in row["wsm"].items()),
                      flush=True)
            rows.append(row)
            with open(out_path, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1, default=str)
        del p, w
        torch.cuda.empty_cache()


if __name__ == "__main__":
    {"check": lambda: check(int(sys.argv[2])), "time": lambda: time_all(sys.argv[2])}[sys.argv[1]]()
