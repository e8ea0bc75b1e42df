"""Session 7 W8A8 many-token sweep (run on the GPU): the TMA / persistent int8 GEMM (kernels/w8a8_gemm_tma.py)
against session 5's pointer GEMM and torch fp16 F.linear, on the 8 Llama-3 8B/70B shapes, in one process.

Every path is checked first on every timed shape (fp16 and bf16 activations) against `w8a8_linear_ref`, and each
TMA config that runs without split-K on the shape against the pointer GEMM bit for bit (fp16); then all are timed by the tables' method
(compress.bench.kernel_timing "rotate": one CUDA graph, weights from DRAM, activation quantizer inside every call).

    SWEEP_M=256,32,64,1024 SWEEP_S=200 python bench/results/h100/kernels_s7_w8a8/sweep_tma.py [OUT.json]

Prints one ROW line per (M, shape, path) as it is measured and a per-M summary (median speedup over fp16 across
the 8 shapes, per path, and of the best TMA config per shape) at the end; stops starting new work after SWEEP_S s.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import call_ms
from kernels.cases import LLAMA_SHAPES, make_w8a8
from kernels.w8a8_gemm_tma import plan
from kernels.w8a8 import _config, _config_pointer_gemm, _launch, w8a8_linear_ref

T0 = time.time()
LIMIT = float(os.environ.get("SWEEP_S", "200"))
MS = [int(v) for v in os.environ.get("SWEEP_M", "256,32,64,1024").split(",")]


def tma(bm, bn, bk=128, w=4, s=4, **kw) -> dict:
    return {"kind": "tma", "BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s, **kw}


def configs(m: int) -> dict[str, dict]:
    if m <= 64:  # weights as the left operand: the token tile is M (32 or 64) wide
        c = {"swap BN128 ws": tma(m, 128, ws=True, swap=True), "swap BN128": tma(m, 128, swap=True),
             "swap BN64 ws": tma(m, 64, ws=True, swap=True), "swap BN128 BK256 ws": tma(m, 128, 256, s=3, ws=True, swap=True),
             "swap BN256 ws": tma(m, 256, s=3, ws=True, swap=True), "swap BN128 ws pdl": tma(m, 128, ws=True, swap=True, pdl=1),
             "swap BN128 ws nosplit": tma(m, 128, ws=True, swap=True, split=1)}
        if m == 64:
            c["64x128 ws"] = tma(64, 128, ws=True)
        return c
    c = {"128x128 ws": tma(128, 128, ws=True), "128x128": tma(128, 128), "128x128 w8": tma(128, 128, w=8),
         "128x256 ws": tma(128, 256, s=3, ws=True), "128x256 w8": tma(128, 256, w=8, s=3),
         "256x128 w8": tma(256, 128, w=8, s=3), "128x128 ws pdl": tma(128, 128, ws=True, pdl=1)}
    if m <= 256:
        c.update({"128x64 ws": tma(128, 64, ws=True), "64x128 ws": tma(64, 128, ws=True),
                  "128x128x256 ws": tma(128, 128, 256, s=3, ws=True), "128x128 ws nosplit": tma(128, 128, ws=True, split=1)})
    return c


def rel_err(a, b) -> float:
    if not torch.isfinite(a).all():
        return float("inf")
    return float(((a.float() - b.float()).norm() / b.float().norm()).item())


def left() -> float:
    return LIMIT - (time.time() - T0)


def main(out_json: str | None) -> None:
    rows = []
    print(f"device {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    for m in MS:
        cfgs = configs(m)
        old_cfg = _config_pointer_gemm(m)
        print(f"== M={m} old={old_cfg} default={_config(m)}", flush=True)
        for name, n, k in LLAMA_SHAPES:
            if left() < 10:
                print(f"time limit: stop before M={m} {name}", flush=True)
                break
            wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
            w16 = (torch.randn(n, k, device="cuda") / k**0.5).half()
            g = torch.Generator("cuda").manual_seed(m)
            x = torch.randn(m, k, device="cuda", generator=g).half()
            xb = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            want, want_b = w8a8_linear_ref(x, wq, ws), w8a8_linear_ref(xb, wq, ws)
            pointer = _launch(x, wq, ws, dict(old_cfg, split=1, waves=None)) if "BK" in old_cfg else None
            paths = {"old": old_cfg, **cfgs}
            times = {"fp16": call_ms(lambda w: F.linear(x, w), w16, "rotate")}
            for pname, cfg in paths.items():
                try:
                    out = _launch(x, wq, ws, cfg)
                    err = rel_err(out, want)
                    err_b = rel_err(_launch(xb, wq, ws, cfg), want_b)
                    exact = None
                    if pointer is not None and cfg.get("kind") == "tma" and plan(m, n, k, cfg, x.device)[0] == 1:
                        exact = bool(torch.equal(out, pointer))
                    ok = err < 3e-3 and err_b < 1.2e-2 and exact is not False
                    ms = call_ms(lambda p, cfg=cfg: _launch(x, p[0], p[1], cfg), (wq, ws), "rotate") if ok else None
                except Exception as e:  # a config the compiler rejects (shared memory, registers): say so, go on
                    err = err_b = exact = ms = None
                    ok = False
                    print(f"FAIL M={m} {name} {pname}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                times[pname] = ms
                row = {"M": m, "layer": name, "N": n, "K": k, "path": pname, "cfg": cfg, "ms": ms,
                       "fp16_ms": times["fp16"], "speedup": times["fp16"] / ms if ms else None, "rel_err": err,
                       "rel_err_bf16": err_b, "bitwise_vs_pointer": exact, "ok": ok}
                rows.append(row)
                print(f"ROW M={m} {name:18s} {pname:22s} {(ms or 0) * 1e3:8.1f} us  fp16 {times['fp16'] * 1e3:8.1f} us  "
                      f"x{row['speedup'] or 0:5.2f}  err {err} bf16 {err_b} exact {exact}", flush=True)
            del wq, ws, w16
            torch.cuda.empty_cache()
        if out_json:
            with open(out_json, "w") as f:
                json.dump(rows, f, indent=1)
    print("== summary: median speedup over torch fp16 across the 8 shapes (rows with all 8 shapes only)", flush=True)
    for m in MS:
        mine = [r for r in rows if r["M"] == m]
        for p in dict.fromkeys(r["path"] for r in mine):
            sp = [r["speedup"] for r in mine if r["path"] == p and r["speedup"]]
            if len(sp) == len(LLAMA_SHAPES):
                print(f"M={m:5d} {p:22s} median x{statistics.median(sp):.3f}  min x{min(sp):.2f}  max x{max(sp):.2f}")
        best = []
        for _, n, k in LLAMA_SHAPES:
            sp = [r for r in mine if r["N"] == n and r["K"] == k and r["speedup"] and r["path"] != "old"]
            if sp:
                b = max(sp, key=lambda r: r["speedup"])
                best.append(b["speedup"])
                print(f"M={m:5d} best TMA {n}x{k}: {b['path']} x{b['speedup']:.2f}")
        if len(best) == len(LLAMA_SHAPES):
            print(f"M={m:5d} best TMA per shape: median x{statistics.median(best):.3f}")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
