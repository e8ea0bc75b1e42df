"""Session 8 W8A8 sweep (run on the GPU): where the fixed microseconds of a W8A8 call go, and whether the session-8
launch variants beat session 5's defaults, on the 8 Llama-3 8B/70B shapes, in one process.

Per (M, shape), all by the tables' method (compress.bench.kernel_timing "rotate": one CUDA graph of >= 120 calls,
weights from DRAM):
- torch fp16 F.linear;
- at M = 16 and M > 64: the activation quantizer alone (`quantize_per_token`, x in L2 as in a decode step) and the
  GEMM alone on x quantized once outside (`_gemm` with the session-5 config, no PDL);
- every path of `paths(m)` (quantizer included), each checked first against `w8a8_linear_ref` (fp16) on the shape.

    SWEEP_M=16,8,4,2,256 SWEEP_S=150 TUNED_OUT=tuned.json python bench/results/h100/kernels_s8_w8a8/sweep_s8.py [OUT.json]

Prints one ROW line per measurement, then per M the median speedup over fp16 across the 8 shapes of every path that
ran on all 8, and the winner: a path whose median (by > 1 %) AND geometric mean over the shapes beat session 5's
("old").
Winners go to TUNED_OUT in the COMPRESS_KERNEL_CONFIGS format under exact-M keys ({"w8a8@M": {bucket: cfg}}).
Stops starting new shapes after SWEEP_S seconds (from the start, compile included).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import call_ms
from kernels._common import m_bucket
from kernels.cases import LLAMA_SHAPES, make_w8a8
from kernels.w8a8 import _config, _config_pointer_gemm, _config_s8, _gemm, _launch, quantize_per_token, w8a8_linear_ref

T0 = time.time()
LIMIT = float(os.environ.get("SWEEP_S", "150"))
MS = [int(v) for v in os.environ.get("SWEEP_M", "16,8,4,2,256").split(",")]
TOL = 3e-3
DEV = os.environ.get("SWEEP_DEVICE", "cuda")  # "cpu" with TRITON_INTERPRET=1: the dry run of the script's logic


def tma(bm, bn, bk=128, w=4, s=4, **kw) -> dict:
    return {"kind": "tma", "BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": s, **kw}


def paths(m: int) -> dict[str, dict]:
    """The session-5 config ("old") and this session's candidates at M (names in the README's tables).
    Call 1 also timed, at M = 16 on three 8B shapes: "late" (quantizer waits for the GEMM before it, which triggers
    after its K loop), "late pf8k", "chain" (session 5's trigger at the start), "fused pdl" (one launch, every program
    takes the rows' absmax itself: 2x slower) and "tma swap" (session 7's TMA GEMM, swapped + warp-specialized: it
    stalled on 8B gate/up). See the README. "s8" and the "qrecip" paths (and the quantizer-with-reciprocal timing)
    were added after call 2 for the next run: not yet timed."""
    old = _config_pointer_gemm(m)
    out = {"old": old}
    xf = {"kind": "gemv", "num_warps": 4, "xf": True}  # one launch: each program quantizes the M rows itself
    if m == 2:
        out.update({"xf": xf, "xf chain": dict(xf, pdl=1, chain=1)})
    elif m <= 16:
        gemm = {k: v for k, v in old.items() if k != "waves"}
        out.update({"fit": dict(gemm, fit=1), "fit2": dict(gemm, fit=2)})
        if m >= 8:
            out["fit s6"] = dict(gemm, fit=1, num_stages=6)
        if m <= 8:
            out["xf chain"] = dict(xf, pdl=1, chain=1)
        if m == 4:
            out["xf"] = xf
        out["s8"] = _config_s8(m)  # the default since call 2 ("fit", and "deep" above M = 4), untimed as one config
        out["s8 qrecip"] = dict(_config_s8(m), qrecip=True)  # quantizer codes from the fp64 reciprocal (untimed)
    elif m > 64:
        out["qrecip"] = dict(old, qrecip=True)
    return out


def rel_err(a, b) -> float:
    if not torch.isfinite(a).all():
        return float("inf")
    return float(((a.float() - b.float()).norm() / b.float().norm()).item())


def left() -> float:
    return LIMIT - (time.time() - T0)


def jobs() -> list[tuple[int, int, int, str, dict]]:
    return [(m, n, k, p, c) for m in MS for _, n, k in LLAMA_SHAPES for p, c in paths(m).items()]


def precompile(workers: int, limit_s: float) -> None:
    """Compile every (M, path) specialization first, one process per job, `workers` at a time (Triton's on-disk
    cache is shared, so the sweep then loads them): call 1 gave 12 processes several jobs each and ran out of its
    60 s with compiles left for the sweep."""
    keys = list(dict.fromkeys((m, p) for m, _, _, p, _ in jobs()))
    deadline = time.time() + limit_s
    running: list[subprocess.Popen] = []
    for m, p in keys:
        while len(running) >= workers and time.time() < deadline:
            running = [r for r in running if r.poll() is None]
            time.sleep(0.2)
        if time.time() >= deadline:  # the rest compile in the sweep itself
            break
        running.append(subprocess.Popen([sys.executable, __file__, "--compile", str(m), p]))
    for r in running:
        try:
            r.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            r.kill()
    print(f"precompile: {len(keys)} jobs, {workers} at a time, {time.time() - T0:.0f} s since start", flush=True)


def compile_worker(m: int, name: str) -> None:
    cfg = paths(m)[name]
    for n, k in ((4096, 4096), (4096, 14336)):  # K = 14336: a split-K grid where the 4096 one has none
        wq = torch.randint(-127, 128, (n, k), device=DEV, dtype=torch.int8)
        ws = torch.rand(n, device=DEV) / 100
        x = torch.randn(m, k, device=DEV).half()
        try:
            _launch(x, wq, ws, cfg)
            if name == "old" and (m == 16 or m > 64):
                xq, sx = quantize_per_token(x)
                _gemm(xq, sx, wq, ws, torch.empty(m, n, device=DEV, dtype=x.dtype), cfg)
        except Exception:  # the sweep reports it
            pass
    if DEV == "cuda":
        torch.cuda.synchronize()


def row(text: str) -> None:
    print(f"ROW {text}", flush=True)


def main(out_json: str | None) -> None:
    rows = []
    print(f"device {torch.cuda.get_device_name() if DEV == 'cuda' else DEV} torch {torch.__version__} M {MS}", flush=True)
    workers = int(os.environ.get("SWEEP_WORKERS", "15"))
    if workers:
        precompile(workers, float(os.environ.get("SWEEP_COMPILE_S", "60")))
    stop = False
    for m in MS:
        print(f"== M={m} old={_config_pointer_gemm(m)} served={_config(m)}", flush=True)
        for name, n, k in LLAMA_SHAPES:
            if left() < 6:
                print(f"time limit: stop before M={m} {name}", flush=True)
                stop = True
                break
            wq, ws = make_w8a8(n, k, DEV, seed=n + k)
            w16 = (torch.randn(n, k, device=DEV) / k**0.5).half()
            x = torch.randn(m, k, device=DEV, generator=torch.Generator(DEV).manual_seed(m)).half()
            want = w8a8_linear_ref(x, wq, ws)
            base = {"M": m, "layer": name, "N": n, "K": k}
            fp16 = call_ms(lambda w: F.linear(x, w), w16, "rotate")
            diag = {}
            if m == 16 or m > 64:
                xq, sx = quantize_per_token(x)
                o = torch.empty(m, n, device=DEV, dtype=x.dtype)
                old = _config_pointer_gemm(m)
                diag["quant_ms"] = call_ms(lambda _: quantize_per_token(x), None, "rotate")
                diag["quant_recip_ms"] = call_ms(lambda _: quantize_per_token(x, recip=True), None, "rotate")
                diag["gemm_ms"] = call_ms(lambda p: _gemm(xq, sx, p[0], p[1], o, old), (wq, ws), "rotate")
                row(f"M={m} {name:16s} fp16 {fp16 * 1e3:7.1f} us  quantizer alone {diag['quant_ms'] * 1e3:6.1f} us  "
                    f"(qrecip {diag['quant_recip_ms'] * 1e3:6.1f} us)  "
                    f"old GEMM alone {diag['gemm_ms'] * 1e3:7.1f} us")
            for pname, cfg in paths(m).items():
                try:
                    err = rel_err(_launch(x, wq, ws, cfg), want)
                    ms = call_ms(lambda p, cfg=cfg: _launch(x, p[0], p[1], cfg), (wq, ws), "rotate") if err < TOL else None
                except Exception as e:  # a config the compiler rejects (shared memory, registers): say so, go on
                    err, ms = None, None
                    print(f"FAIL M={m} {name} {pname}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                r = dict(base, path=pname, cfg=cfg, ms=ms, fp16_ms=fp16, rel_err=err, **diag,
                         speedup=fp16 / ms if ms else None)
                rows.append(r)
                if ms:
                    row(f"M={m} {name:16s} {pname:14s} {ms * 1e3:7.1f} us  fp16 {fp16 * 1e3:7.1f} us  x{r['speedup']:5.2f}  "
                        f"{(n * k + 2 * m * (k + n)) / ms / 1e9:6.0f} GB/s  err {err:.1e}")
                else:
                    row(f"M={m} {name:16s} {pname:14s} not timed: err {err}")
            del wq, ws, w16
            if DEV == "cuda":
                torch.cuda.empty_cache()
            if out_json:  # after every shape: a call cut short still returns what it measured
                with open(out_json, "w") as f:
                    json.dump(rows, f, indent=1)
        if stop:
            break
    summarize(rows)


def summarize(rows: list[dict]) -> None:
    print("== summary: median speedup over torch fp16 across the 8 shapes (paths measured on all 8)", flush=True)
    winners = {}
    for m in MS:
        mine = [r for r in rows if r["M"] == m]
        sp = {}
        for p in dict.fromkeys(r["path"] for r in mine):
            v = [r["speedup"] for r in mine if r["path"] == p and r["speedup"]]
            if len(v) == len(LLAMA_SHAPES):
                sp[p] = v
                print(f"M={m:4d} {p:14s} median x{statistics.median(v):.3f}  min x{min(v):.2f}  max x{max(v):.2f}  "
                      f"gmean x{math.exp(statistics.fmean(map(math.log, v))):.3f}", flush=True)
        if "old" not in sp:
            continue
        gm = {p: statistics.fmean(map(math.log, v)) for p, v in sp.items()}
        better = [p for p in sp if p != "old" and statistics.median(sp[p]) > 1.01 * statistics.median(sp["old"])
                  and gm[p] > gm["old"]]  # 1 %: above the replay-to-replay spread of these medians
        if better:
            top = max(better, key=lambda p: statistics.median(sp[p]))
            winners[m] = paths(m)[top]
            print(f"M={m:4d} WINNER {top} median x{statistics.median(sp[top]):.3f} over old "
                  f"x{statistics.median(sp['old']):.3f}", flush=True)
        for r in [r for r in mine if r["path"] == "old" and "quant_ms" in r]:
            print(f"M={m:4d} split {r['layer']:16s} call {r['ms'] * 1e3 if r['ms'] else 0:6.1f} = quantizer alone "
                  f"{r['quant_ms'] * 1e3:5.1f} + GEMM alone {r['gemm_ms'] * 1e3:6.1f} us (+ "
                  f"{((r['ms'] or 0) - r['quant_ms'] - r['gemm_ms']) * 1e3:+.1f} us)", flush=True)
    tuned = os.environ.get("TUNED_OUT")
    if tuned and winners:  # COMPRESS_KERNEL_CONFIGS, exact-M keys (kernels.w8a8._config)
        with open(tuned, "w") as f:
            json.dump({f"w8a8@{m}": {str(m_bucket(m)): c} for m, c in winners.items()}, f, indent=1)
        print(f"wrote {tuned}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--compile":
        compile_worker(int(sys.argv[2]), sys.argv[3])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else None)
