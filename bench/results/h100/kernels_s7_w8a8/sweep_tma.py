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
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import call_ms
from kernels.cases import LLAMA_SHAPES, make_w8a8
from kernels import w8a8_gemm_tma
from kernels._common import m_bucket
from kernels.w8a8 import _config, _config_pointer_gemm, _launch, quantize_per_token, w8a8_linear_ref
from kernels.w8a8_gemm_tma import plan

T0 = time.time()
LIMIT = float(os.environ.get("SWEEP_S", "200"))
MS = [int(v) for v in os.environ.get("SWEEP_M", "256,32,64,1024").split(",")]


def tma(bm, bn, bk=128, w=4, s=4, **kw) -> dict:
    return {"kind": "tma", "BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s, **kw}


def configs(m: int) -> dict[str, dict]:
    """Call 2's candidates (call 1: every TMA config at M = 256 lost to the pointer GEMM, 0.09-0.64x of fp16 on 8B
    q/o, all of them with K split to >= 1 wave; here the split fits one wave and most shapes run unsplit)."""
    if m <= 64:  # weights as the left operand: the token tile is M (32 or 64) wide
        return {"swap BN128 ws": tma(m, 128, ws=True, swap=True), "swap BN64 ws": tma(m, 64, ws=True, swap=True),
                "swap BN128": tma(m, 128, swap=True)}
    return {"64x128 ws": tma(64, 128, ws=True), "128x64 ws": tma(128, 64, ws=True), "128x128 ws": tma(128, 128, ws=True),
            "64x128": tma(64, 128), "64x128 ws pdl": tma(64, 128, ws=True, pdl=1), "64x256 ws": tma(64, 256, s=3, ws=True),
            "128x128 w8": tma(128, 128, w=8), "64x128 ws s6": tma(64, 128, s=6, ws=True),
            "64x128x256 ws": tma(64, 128, 256, s=3, ws=True), "128x64 ws s6": tma(128, 64, s=6, ws=True)}


def rel_err(a, b) -> float:
    if not torch.isfinite(a).all():
        return float("inf")
    return float(((a.float() - b.float()).norm() / b.float().norm()).item())


def left() -> float:
    return LIMIT - (time.time() - T0)


def chosen(m: int) -> dict[str, dict]:
    """configs(m), or only those named in SWEEP_CONFIGS (comma-separated) when set."""
    names = [v for v in os.environ.get("SWEEP_CONFIGS", "").split(",") if v]
    return {k: v for k, v in configs(m).items() if not names or k in names}


def jobs() -> list[tuple[int, str, int, int, str, dict]]:
    """(M, layer, N, K, path, config) of every checked and timed kernel call, in sweep order."""
    out = []
    for m in MS:
        old = _config_pointer_gemm(m)
        paths = {"old": old, "pointer split1": dict(old, split=1, waves=None), **chosen(m)}
        out += [(m, name, n, k, p, c) for name, n, k in LLAMA_SHAPES for p, c in paths.items()]
    return out


def precompile(workers: int, limit_s: float) -> None:
    """Compile every (config, shape, dtype) specialization in `workers` processes first (Triton's on-disk cache is
    shared, so the sweep then loads them): call 1 spent most of its 220 s compiling one config after another."""
    procs = [subprocess.Popen([sys.executable, __file__, "--compile", str(i), str(workers)]) for i in range(workers)]
    deadline = time.time() + limit_s
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
    print(f"precompile: {workers} workers, {time.time() - T0:.0f} s since start", flush=True)


def compile_worker(index: int, workers: int) -> None:
    # One worker per path (all its shapes): a config's specializations are compiled once, not by several workers.
    names = list(dict.fromkeys(j[4] for j in jobs()))[index::workers]
    todo = [j for j in jobs() if j[4] in names]
    weights: dict[tuple[int, int], tuple] = {}
    for m, _, n, k, _, cfg in todo:
        if (n, k) not in weights:
            weights[(n, k)] = (torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8),
                               torch.rand(n, device="cuda") / 100)
        wq, ws = weights[(n, k)]
        for dtype in (torch.float16, torch.bfloat16):
            try:
                _launch(torch.randn(m, k, device="cuda").to(dtype), wq, ws, cfg)
            except Exception:  # the sweep reports it
                pass
    torch.cuda.synchronize()


def main(out_json: str | None) -> None:
    rows = []
    print(f"device {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    precompile(int(os.environ.get("SWEEP_WORKERS", "12")), float(os.environ.get("SWEEP_COMPILE_S", "120")))
    todo = jobs()
    for m in MS:
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
            xq, sx = quantize_per_token(x)
            times = {"fp16": call_ms(lambda w: F.linear(x, w), w16, "rotate"),
                     "quant": call_ms(lambda _w: quantize_per_token(x), None, "rotate")}
            print(f"ROW M={m} {name:18s} quantizer alone {times['quant'] * 1e3:8.1f} us", flush=True)
            for pname, cfg in [(p, c) for (mm, nm, _, _, p, c) in todo if mm == m and nm == name and p != "pointer split1"]:
                gemm_ms = None
                try:
                    out = _launch(x, wq, ws, cfg)
                    err = rel_err(out, want)
                    err_b = rel_err(_launch(xb, wq, ws, cfg), want_b)
                    exact = None
                    if pointer is not None and cfg.get("kind") == "tma" and plan(m, n, k, cfg, x.device)[0] == 1:
                        exact = bool(torch.equal(out, pointer))
                    ok = err < 3e-3 and err_b < 1.2e-2 and exact is not False
                    ms = call_ms(lambda p, cfg=cfg: _launch(x, p[0], p[1], cfg), (wq, ws), "rotate") if ok else None
                    if ok and cfg.get("kind") == "tma" and not cfg.get("pdl"):  # the GEMM alone, on x quantized once outside
                        o = torch.empty(m, n, device="cuda", dtype=torch.float16)
                        gemm_ms = call_ms(lambda p, cfg=cfg: w8a8_gemm_tma.launch(xq, sx, p[0], p[1], o, cfg), (wq, ws),
                                          "rotate")
                except Exception as e:  # a config the compiler rejects (shared memory, registers): say so, go on
                    err = err_b = exact = ms = None
                    ok = False
                    print(f"FAIL M={m} {name} {pname}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                times[pname] = ms
                split = plan(m, n, k, cfg, x.device)[0] if cfg.get("kind") == "tma" else None
                row = {"M": m, "layer": name, "N": n, "K": k, "path": pname, "cfg": cfg, "ms": ms, "gemm_ms": gemm_ms,
                       "quant_ms": times["quant"], "fp16_ms": times["fp16"], "split": split,
                       "speedup": times["fp16"] / ms if ms else None, "rel_err": err, "rel_err_bf16": err_b,
                       "bitwise_vs_pointer": exact, "ok": ok}
                rows.append(row)
                print(f"ROW M={m} {name:18s} {pname:16s} {(ms or 0) * 1e3:8.1f} us  fp16 {times['fp16'] * 1e3:8.1f} us  "
                      f"x{row['speedup'] or 0:5.2f}  gemm {(gemm_ms or 0) * 1e3:6.1f} us split {split} err {err:.1e} "
                      f"bf16 {err_b:.1e} exact {exact}" if ok else f"ROW M={m} {name} {pname} not ok: err {err} {err_b} {exact}",
                      flush=True)
            del wq, ws, w16
            torch.cuda.empty_cache()
            if out_json:  # after every shape: a call cut short still returns what it measured
                with open(out_json, "w") as f:
                    json.dump(rows, f, indent=1)
    print("== summary: median speedup over torch fp16 across the 8 shapes (paths with all 8 shapes only)", flush=True)
    winners = {}
    for m in MS:
        mine = [r for r in rows if r["M"] == m]
        medians = {}
        for p in dict.fromkeys(r["path"] for r in mine):
            sp = [r["speedup"] for r in mine if r["path"] == p and r["speedup"]]
            if len(sp) == len(LLAMA_SHAPES):
                medians[p] = statistics.median(sp)
                print(f"M={m:5d} {p:16s} median x{medians[p]:.3f}  min x{min(sp):.2f}  max x{max(sp):.2f}", flush=True)
        best = []
        for _, n, k in LLAMA_SHAPES:
            sp = [r for r in mine if r["N"] == n and r["K"] == k and r["speedup"] and r["path"] != "old"]
            if sp:
                b = max(sp, key=lambda r: r["speedup"])
                best.append(b["speedup"])
                print(f"M={m:5d} best TMA {n}x{k}: {b['path']} x{b['speedup']:.2f}", flush=True)
        if len(best) == len(LLAMA_SHAPES):
            print(f"M={m:5d} best TMA per shape: median x{statistics.median(best):.3f}", flush=True)
        tmas = {p: v for p, v in medians.items() if p != "old"}
        if tmas and "old" in medians and max(tmas.values()) > medians["old"]:
            top = max(tmas, key=tmas.get)
            winners[m] = chosen(m)[top]
            print(f"M={m:5d} WINNER {top} x{tmas[top]:.3f} over old x{medians['old']:.3f}", flush=True)
    tuned = os.environ.get("TUNED_OUT")
    if tuned and winners:  # COMPRESS_KERNEL_CONFIGS format: {kernel: {M bucket: config}} (kernels._common.m_bucket)
        with open(tuned, "w") as f:
            json.dump({"w8a8": {str(m_bucket(m)): c for m, c in winners.items()}}, f, indent=1)
        print(f"wrote {tuned}", flush=True)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--compile":
        compile_worker(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else None)
