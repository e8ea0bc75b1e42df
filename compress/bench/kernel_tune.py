"""Config sweep for the W4A16 / W8A8 / 2:4 (fp16, W8A8, W8A16) kernels (developer tool, run on the GPU): each
candidate is checked against its plain-torch reference on one real shape, then timed on representative Llama shapes
next to torch fp16 F.linear (and the peers that run here). Its output is the evidence for the `_config`
tables in kernels/*.py (recorded in bench/results/h100/kernels/NOTES.md).

    python -m compress.bench.kernel_tune [w4a16 w8a8 sparse24 sparse24-w8a16 gemlite] > tune.log
        (TUNE_JSON=path keeps raw rows; sparse24 includes sparse24-w8a16, the W8A16 2:4 GEMV alone)
    python -m compress.bench.kernel_tune --final --write tuned.json w4a16 w8a8 sparse24
        (the short candidate lists; writes the best config per kernel and M bucket, which
        COMPRESS_KERNEL_CONFIGS=tuned.json makes the launchers use)
    --timing flush|rotate: the timing method (compress.bench.kernel_timing; default rotate, as the tables)
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import DEFAULT_METHOD, call_ms
from kernels._common import m_bucket
from kernels.cases import LLAMA_SHAPES, make_int4, make_sparse24, make_w8a8

# (N, K): 8B q/o, 8B gate/up, 8B down, 70B gate/up, 70B k/v.
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (1024, 8192)]
ALL_SHAPES = [(n, k) for _, n, k in LLAMA_SHAPES]  # the 8 shapes the targets take the median over
METHOD = DEFAULT_METHOD  # --timing


def time_ms(fn, weights=None) -> float:
    """Per-call ms of fn(weights) by the sweep's method (weights rotated under "rotate")."""
    return call_ms(fn, weights, METHOD)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30)).item())


FINAL = False  # --final: the short candidate lists (the configs that led the first sweep, and their variants)
BEST: dict[str, dict[str, dict]] = {}  # kernel -> {M bucket: best config}, for --write


def _sweep(name: str, ms: list[int], configs_for, build, call, ref, log: list, tol: float = 3e-3,
           shapes: list[tuple[int, int]] | None = None) -> dict:
    """Time every config of configs_for(m) on `shapes` (default SHAPES); returns {m: (best config key, geo
    speedup)}. A config whose error on any shape exceeds tol never wins."""
    scores: dict[tuple[int, str], list[float]] = {}
    errors: dict[tuple[int, str], float] = {}
    times: dict[tuple[int, str], list[float]] = {}
    base_ms: dict[int, list[float]] = {}
    for n, k in shapes or SHAPES:
        layer = build(n, k)
        w = (torch.randn(n, k, device="cuda") / k**0.5).half()
        for m in ms:
            x = torch.randn(m, k, device="cuda").half()
            base = time_ms(lambda w: F.linear(x, w), w)
            base_ms.setdefault(m, []).append(base)
            want = ref(x, layer)  # every config is checked on every shape it is timed on
            for cfg in configs_for(m):
                key = json.dumps(cfg, sort_keys=True)
                try:
                    if want is not None:
                        errors[(m, key)] = max(errors.get((m, key), 0.0), _rel(call(x, layer, cfg), want))
                    t = time_ms(lambda L: call(x, L, cfg), layer)
                except Exception as e:  # a config the compiler rejects (e.g. out of shared memory)
                    print(f"  {name} M={m} {key}: failed {type(e).__name__}: {str(e)[:160]}", flush=True)
                    t = math.inf
                scores.setdefault((m, key), []).append(base / t)
                times.setdefault((m, key), []).append(t)
                # one line per timing as it is made: a sweep cut short by its time limit still leaves these
                print(f"ROW {name} M={m} N={n} K={k} {key} us {1e3 * t:.2f} fp16_us {1e3 * base:.2f} "
                      f"speedup {base / t:.3f} err {errors.get((m, key), float('nan')):.1e}", flush=True)
        del layer, w
        torch.cuda.empty_cache()
    best = {}
    for m in ms:
        ranked = sorted(((key, sp) for (mm, key), sp in scores.items() if mm == m),
                        key=lambda kv: -math.prod(kv[1]) ** (1 / len(kv[1])))
        print(f"{name} M={m}: torch fp16 ms per shape {[round(b, 4) for b in base_ms[m]]}", flush=True)
        for key, sp in ranked:
            geo = math.prod(sp) ** (1 / len(sp))
            med = statistics.median(sp)  # the targets' statistic (median over the shapes)
            err = errors.get((m, key))
            flag = "" if err is None or err < tol else f"  ERROR {err:.2e} > {tol}"
            print(f"{name} M={m} geo {geo:.2f}x med {med:.2f}x {key} per-shape {[round(s, 2) for s in sp]} "
                  f"ms {[round(t, 4) for t in times[(m, key)]]} err {err if err is None else f'{err:.1e}'}{flag}", flush=True)
            log.append({"kernel": name, "M": m, "config": json.loads(key), "geo_speedup": geo, "per_shape": sp,
                        "ms": times[(m, key)], "torch_ms": base_ms[m], "rel_err": err})
        ok = [(key, sp) for key, sp in ranked if errors.get((m, key)) is not None and errors[(m, key)] < tol
              and all(math.isfinite(v) and v > 0 for v in sp)]
        if ok:
            best[m] = ok[0]
            kernel, bucket = best_entry(name, m)
            BEST.setdefault(kernel, {})[bucket] = json.loads(ok[0][0])
    return best


def best_entry(name: str, m: int) -> tuple[str, str]:
    """Where --write puts the winner at M: the M bucket's entry when M is a bucket's own value, else an exact-M entry
    ("w8a8@8": {"16": config}), which kernels.w8a8._config reads before the bucket's. The W8A8 --final sweep is the one
    that runs at such Ms (2 and 8 tokens); before session 17 their winners went under the keys "2" / "8", which no
    launcher looked up."""
    bucket = m_bucket(m)
    return (name, str(m)) if bucket == m else (f"{name}@{m}", str(bucket))


# ---------------------------------------------------------------------------------------------- W4A16
def _w4a16_configs(m: int) -> list[dict]:
    if FINAL:
        if m <= 16:
            return [{"kind": "tcx", "BM": 16, "BN": bn, "num_warps": nw, "num_stages": st, "waves": wv}
                    for bn, nw, st, wv in [(128, 4, 2, 2), (128, 4, 2, 4), (256, 4, 2, 2), (256, 8, 2, 2), (128, 4, 3, 4)]] + \
                   [{"kind": "tc", "BM": 16, "BN": bn, "num_warps": nw, "num_stages": st, "NB": nb}
                    for bn, nw, st, nb in [(128, 8, 2, 2), (128, 8, 3, 2), (128, 8, 2, 4), (256, 8, 2, 2), (64, 4, 2, 4)]] + \
                   [{"kind": "tc", "BM": 16, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 2, "prefetch": True}]
        if m <= 64:
            return [{"kind": "tcx", "BM": 32, "BN": 128, "num_warps": 4, "num_stages": 2},
                    {"kind": "tcx", "BM": 32, "BN": 128, "num_warps": 4, "num_stages": 2, "waves": 1},
                    {"kind": "tcx", "BM": 64, "BN": 64, "num_warps": 4, "num_stages": 2},
                    {"kind": "tc", "BM": 64, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 1}]
        return [{"kind": "dequant"}, {"kind": "tc", "BM": 128, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 1}]
    out = []
    if m <= 16:
        out.append({"kind": "gemv", "BN": 128, "num_warps": 8} if m == 1 else
                   {"kind": "mma", "BM": 16, "BN": 128, "num_warps": 4, "num_stages": 2})  # last session's choice
        for bn, nw, st, waves in [(256, 8, 2, 1), (256, 8, 2, 2), (256, 8, 2, 4), (256, 4, 2, 2), (256, 4, 2, 4),
                                  (128, 4, 2, 2), (128, 4, 2, 4), (256, 8, 3, 2), (512, 8, 2, 2)]:
            out.append({"kind": "tcx", "BM": 16, "BN": bn, "num_warps": nw, "num_stages": st, "waves": waves})
        out += [{"kind": "tc", "BM": 16, "BN": 64, "num_warps": 4, "num_stages": 2, "NB": 1},
                {"kind": "tc", "BM": 16, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 2}]
    elif m <= 64:
        out += [{"kind": "tcx", "BM": 32, "BN": 256, "num_warps": 8, "num_stages": 2},
                {"kind": "tcx", "BM": 32, "BN": 128, "num_warps": 4, "num_stages": 2},
                {"kind": "tcx", "BM": 32, "BN": 256, "num_warps": 8, "num_stages": 2, "waves": 1},
                {"kind": "tcx", "BM": 64, "BN": 64, "num_warps": 4, "num_stages": 2},
                {"kind": "tc", "BM": 64, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 1},
                {"kind": "tc", "BM": 64, "BN": 64, "num_warps": 4, "num_stages": 2, "NB": 1},
                {"kind": "mma", "BM": 64, "BN": 64, "num_warps": 4, "num_stages": 2},
                {"kind": "dequant"}]
    else:
        out += [{"kind": "dequant"},
                {"kind": "mma", "BM": 128, "BN": 64, "num_warps": 4, "num_stages": 2},
                {"kind": "tc", "BM": 128, "BN": 128, "num_warps": 8, "num_stages": 2, "NB": 1},
                {"kind": "tcx", "BM": 32, "BN": 256, "num_warps": 8, "num_stages": 2}]
    return out


def tune_w4a16(log):
    from kernels.w4a16 import _launch, w4a16_linear_ref

    _sweep("w4a16", [1, 16, 64, 256], _w4a16_configs,
           lambda n, k: make_int4(n, k, 128, True, torch.float16, "cuda"),
           lambda x, p, cfg: _launch(x, p["qweight"], p["scales"], None, 128, cfg),
           lambda x, p: w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128), log)


def check_w4a16_variants() -> None:
    """The asm dequantization for every (dtype, symmetry, group) on a real shape, both new kernels."""
    from kernels.w4a16 import _launch, w4a16_linear_ref

    n, k = 4096, 4096
    for dtype in (torch.float16, torch.bfloat16):
        for gs, sym in ((128, True), (128, False), (64, True), (64, False)):
            p = make_int4(n, k, gs, sym, dtype, "cuda", seed=gs + sym)
            for m in (1, 5, 16):
                x = torch.randn(m, k, device="cuda").to(dtype)
                want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
                for cfg in ({"kind": "tcx", "BM": 16, "BN": 256, "num_warps": 8, "num_stages": 2}, {"kind": "dequant"}):
                    err = _rel(_launch(x, p["qweight"], p["scales"], p["zeros"], gs, cfg), want)
                    tol = 3e-3 if dtype == torch.float16 else 1.2e-2
                    print(f"check w4a16 {dtype} g{gs} {'sym' if sym else 'asym'} M={m} {cfg['kind']}: rel err {err:.2e}"
                          f"{'' if err < tol else '  FAIL'}", flush=True)


# ----------------------------------------------------------------------------------------------- W8A8
def _w8a8_configs(m: int) -> list[dict]:
    if FINAL:  # session 5 (rotating timing): the tensor-core GEMM's small-M tiles, the few-token dp4a GEMV, and the
        # M = 256 tiles with the token tiles of a weight tile side by side (m_fast)
        if m <= 16:
            base = {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "waves": 2, "pdl": 2048}
            out = [base, dict(base, waves=1), dict(base, waves=4), dict(base, BK=512, num_stages=3),
                   dict(base, BN=128, num_stages=3), dict(base, BN=32, num_warps=2),
                   dict(base, BK=128, num_stages=6), dict(base, fused=True), dict(base, chain=1),
                   dict(base, waves=1, chain=1)]
            out += [{"kind": "gemv", "num_warps": 4, "pdl": 1}, {"kind": "gemv", "num_warps": 4, "pdl": 1, "acc": 64},
                    {"kind": "gemv", "num_warps": 8, "pdl": 1}, {"kind": "gemv", "BN": 16, "num_warps": 4, "pdl": 1},
                    {"kind": "gemv", "num_warps": 4, "pdl": 1, "chain": 1}]
            return out
        if m <= 64:
            return [{"BM": 64, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 3},
                    {"BM": 64, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 4, "pdl": 4096},
                    {"BM": 64, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 3}]
        return [{"BM": 128, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3},
                {"BM": 128, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3, "m_fast": True},
                {"BM": 128, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 4, "m_fast": True, "pdl": 4096},
                {"BM": 128, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 3, "m_fast": True},
                {"BM": 128, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 3, "m_fast": True, "waves": 1},
                {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 4, "m_fast": True},
                {"BM": 256, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3},
                {"BM": 256, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 3},
                {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3, "m_fast": True},
                {"BM": 64, "BN": 128, "BK": 128, "num_warps": 4, "num_stages": 4, "m_fast": True}]
    if m <= 16:
        out = [{"BM": 16, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 3} if m <= 8 else
               {"BM": 16, "BN": 64, "BK": 128, "num_warps": 8, "num_stages": 3}]  # last session (fused quant)
        for bn, bk, nw, st, waves in [(128, 128, 4, 3, 2), (128, 128, 4, 3, 4), (128, 256, 4, 4, 2), (128, 256, 4, 4, 4),
                                      (64, 256, 4, 4, 2), (64, 256, 4, 4, 4), (128, 128, 4, 5, 2), (256, 128, 4, 4, 2),
                                      (64, 128, 4, 4, 4), (128, 256, 8, 4, 2)]:
            out.append({"BM": 16, "BN": bn, "BK": bk, "num_warps": nw, "num_stages": st, "fused": False, "waves": waves})
        return out
    bm = min(128, 1 << (m - 1).bit_length())
    return [{"BM": bm, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3},
            {"BM": bm, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 3},
            {"BM": bm, "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 4},
            {"BM": bm, "BN": 256, "BK": 128, "num_warps": 8, "num_stages": 3},
            {"BM": min(256, max(bm, m)), "BN": 128, "BK": 128, "num_warps": 8, "num_stages": 3},
            {"BM": bm, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4},
            {"BM": bm, "BN": 128, "BK": 128, "num_warps": 4, "num_stages": 4}]


def tune_w8a8(log):
    from kernels.w8a8 import _launch, quantize_per_token, w8a8_linear_ref

    _sweep("w8a8", [2, 8, 16, 256] if FINAL else [1, 16, 64, 256], _w8a8_configs, lambda n, k: make_w8a8(n, k, "cuda"),
           lambda x, p, cfg: _launch(x, p[0], p[1], cfg), lambda x, p: w8a8_linear_ref(x, p[0], p[1]), log,
           shapes=ALL_SHAPES if FINAL else SHAPES)
    if FINAL:
        return
    for m in (1, 16, 256):  # the activation quantization pass alone, and torch._int_mm alone
        for n, k in SHAPES[:4]:
            x = torch.randn(m, k, device="cuda").half()
            tq = time_ms(lambda _: quantize_per_token(x))
            line = f"w8a8 quantize_per_token M={m} K={k}: {tq:.4f} ms"
            if m > 16:
                xq = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8)
                wt = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8).t()
                line += f"; torch._int_mm N={n}: {time_ms(lambda wt: torch._int_mm(xq, wt), wt):.4f} ms"
            print(line, flush=True)


# ----------------------------------------------------------------------------------------------- 2:4
def _sp_configs(kind: str):
    from kernels.sparse24 import FW_CONFIG, IW_CONFIG

    def configs(m: int) -> list[dict]:
        if FINAL:
            out = [{"kind": "prmt", "BN": bn, "BW": bw, "num_warps": nw, "waves": wv}
                   for bn, bw, nw, wv in [(16, 8, 4, 4), (32, 8, 4, 4), (16, 8, 4, 2), (64, 8, 8, 2), (16, 4, 4, 4)]]
            if kind == "f":  # session 16's quad GEMV in the two tilings of kernels.sparse24._config_fw
                out += [dict(FW_CONFIG), dict(FW_CONFIG, BQ=128)]
            if kind == "i":
                out += [dict(out[0], pdl=1024), dict(out[1], pdl=2048)]
                out += [dict(out[i], fused=True) for i in range(5)]  # x quantized in every program, no quantizer launch
                out += [{"kind": "prmt", "BN": 64, "BW": 4, "num_warps": 4, "waves": 2, "fused": True},
                        {"kind": "prmt", "BN": 32, "BW": 16, "num_warps": 8, "waves": 2, "fused": True}]
                # session 16's meta-word GEMV in the three tilings of kernels.sparse24._config_iw
                out += [dict(IW_CONFIG), dict(IW_CONFIG, BW=64), dict(IW_CONFIG, BN=4, BW=128)]
            return out
        out = [{"kind": "gemv", "BN": 32, "BW": 8, "num_warps": 4}]  # last session
        for bn, bw, nw in [(32, 4, 4), (64, 4, 4), (32, 8, 4), (16, 8, 4), (64, 8, 8), (128, 4, 8)]:
            for waves in (2, 4):
                out.append({"kind": "prmt", "BN": bn, "BW": bw, "num_warps": nw, "waves": waves})
        return out

    return configs


def _w16_configs(m: int) -> list[dict]:
    """The one-token W8A16 2:4 GEMV (kernels.sparse24 `_sparse24_gemv_w16_kernel`): the tilings of session 18's probes
    (bench/results/h100/kernels_s18/), whose time follows how the grid fits the programs an SM holds."""
    from kernels.sparse24 import W16_CONFIG

    return [dict(W16_CONFIG, BN=bn, BW=bw, num_warps=nw)
            for bn, bw, nw in [(8, 32, 4), (8, 32, 8), (16, 16, 4), (32, 8, 4), (4, 64, 4), (4, 64, 8), (16, 8, 4),
                               (8, 16, 4)]]


def tune_sparse24_w8a16(log):
    """The one-token W8A16 2:4 GEMV's tilings (`_w16_configs`; also a job of its own, "sparse24-w8a16")."""
    from kernels.sparse24 import _launch_w8a16, sparse24_w8a16_linear_ref

    _sweep("sparse24-w8a16", [1], _w16_configs, lambda n, k: make_sparse24(n, k, torch.int8, "cuda"),
           lambda x, p, cfg: _launch_w8a16(x, p["values"], p["meta"], p["w_scale"], cfg),
           lambda x, p: sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"]), log,
           shapes=ALL_SHAPES if FINAL else SHAPES)


def tune_sparse24(log):
    from kernels.sparse24 import _launch, sparse24_linear_ref, sparse24_w8a8_linear_ref
    from kernels.w8a8 import w8a8_linear

    _sweep("sparse24-fp16", [1], _sp_configs("f"), lambda n, k: make_sparse24(n, k, torch.float16, "cuda"),
           lambda x, p, cfg: _launch(x, p["values"], p["meta"], None, cfg),
           lambda x, p: sparse24_linear_ref(x, p["values"], p["meta"]), log)
    _sweep("sparse24-int8", [1], _sp_configs("i"), lambda n, k: make_sparse24(n, k, torch.int8, "cuda"),
           lambda x, p, cfg: _launch(x, p["values"], p["meta"], p["w_scale"], cfg),
           lambda x, p: sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"]), log,
           shapes=ALL_SHAPES if FINAL else SHAPES)
    tune_sparse24_w8a16(log)
    if FINAL:  # the dense int8 side of the 2:4 target: the runtime's one-token int8 GEMV (its offered tilings)
        from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8
        from kernels.w8a8 import w8a8_linear_ref

        _sweep("w8a8-gemv_i8", [1], lambda m: [{"tile": list(c)} for c in GEMV_I8_CONFIGS],
               lambda n, k: make_w8a8(n, k, "cuda"),
               lambda x, p, cfg: gemv_i8(x, None, p[0], p[1], x.dtype, tuple(cfg["tile"])),
               lambda x, p: w8a8_linear_ref(x, p[0], p[1]), log, shapes=ALL_SHAPES)
        return
    # The dense int8 reference of the 2:4 target, with its default config, on the same shapes.
    for n, k in SHAPES:
        wq, ws = make_w8a8(n, k, "cuda")
        x = torch.randn(1, k, device="cuda").half()
        print(f"sparse24 dense-int8 (w8a8_linear default) M=1 N={n} K={k}: "
              f"{time_ms(lambda w: w8a8_linear(x, *w), (wq, ws)):.4f} ms", flush=True)
    for dtype in (torch.float16, torch.bfloat16, torch.int8):  # odd shapes and bf16 on the GPU
        for m, n, k in ((1, 4096, 4096), (3, 1000, 4104), (2, 777, 1028)):
            p = make_sparse24(n, k, dtype, "cuda", seed=n)
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16 if dtype == torch.bfloat16 else torch.float16)
            cfg = {"kind": "prmt", "BN": 32, "BW": 4, "num_warps": 4}
            if dtype == torch.int8:
                err = _rel(_launch(x, p["values"], p["meta"], p["w_scale"], cfg),
                           sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"]))
            else:
                err = _rel(_launch(x, p["values"], p["meta"], None, cfg), sparse24_linear_ref(x, p["values"], p["meta"]))
            tol = 1.2e-2 if dtype == torch.bfloat16 else 3e-3
            print(f"check sparse24 prmt {dtype} M={m} N={n} K={k}: rel err {err:.2e}{'' if err < tol else '  FAIL'}", flush=True)


# -------------------------------------------------------------------------------------------- gemlite
def tune_gemlite(log, budget_s: float = 60.0):
    """gemlite (PyPI, Triton) A16W4 g128 as a peer, timed under CUDA graphs like ours."""
    t0 = time.time()
    try:
        from gemlite.core import DType, GemLiteLinearTriton
    except Exception as e:
        print(f"gemlite: not importable ({type(e).__name__}: {e})", flush=True)
        return
    from compress.packing.int4 import unpack_int4

    for n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda")
        u = unpack_int4(p["qweight"], k)
        lin = GemLiteLinearTriton(W_nbits=4, group_size=128, in_features=k, out_features=n, input_dtype=DType.FP16,
                                  output_dtype=DType.FP16)
        s = p["scales"].t().contiguous()  # (N, G)
        lin.pack(u, s, torch.full_like(s, 8.0), bias=None)
        w = (torch.randn(n, k, device="cuda") / k**0.5).half()
        for m in (1, 16, 64, 256):
            if time.time() - t0 > budget_s:
                print("gemlite: time budget spent, stopping", flush=True)
                return
            x = torch.randn(m, k, device="cuda").half()
            try:
                from kernels.w4a16 import w4a16_linear_ref
                err = _rel(lin(x), w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128))
                t = time_ms(lambda lin: lin(x), lin)
            except Exception as e:
                print(f"gemlite N={n} K={k} M={m}: failed {type(e).__name__}: {str(e)[:160]}", flush=True)
                continue
            base = time_ms(lambda w: F.linear(x, w), w)
            print(f"gemlite N={n} K={k} M={m}: {t:.4f} ms, torch {base:.4f} ms, speedup {base / t:.2f}x, rel err {err:.1e}",
                  flush=True)
            log.append({"kernel": "gemlite", "N": n, "K": k, "M": m, "ms": t, "torch_ms": base, "rel_err": err})


def main(argv: list[str]) -> None:
    global FINAL, METHOD
    args = list(argv)
    if "--timing" in args:
        i = args.index("--timing")
        METHOD = args[i + 1]
        del args[i:i + 2]
    write = None
    if "--write" in args:
        i = args.index("--write")
        write = args[i + 1]
        del args[i:i + 2]
    if "--final" in args:
        args.remove("--final")
        FINAL = True
    log: list = []
    jobs = {"w4a16": tune_w4a16, "w4a16-check": lambda _log: check_w4a16_variants(), "w8a8": tune_w8a8,
            "sparse24": tune_sparse24, "sparse24-w8a16": tune_sparse24_w8a16, "gemlite": tune_gemlite}
    for name in args or ["w4a16-check", "w4a16", "w8a8", "sparse24", "gemlite"]:
        t0 = time.time()
        jobs[name](log)
        print(f"[tune] {name} done in {time.time() - t0:.0f} s", flush=True)
        out = os.environ.get("TUNE_JSON")  # where to keep the raw sweep (rewritten after each job)
        if out:
            with open(out, "w") as f:
                json.dump(log, f, indent=1)
        if write:  # rewritten after each job: a run cut short still leaves what it measured
            with open(write, "w") as f:
                json.dump(BEST, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
