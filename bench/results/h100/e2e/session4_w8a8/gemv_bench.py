"""Session 4, W8A8 batch-1 decode: the int8 GEMV and the W8A8 decode layer's launches, timed as CUDA-graph
replays (the decode step's situation), before (decode_kernels_before.py, the code at commit 3bcf560) vs now.

Usage (repository root, GPU): python3 bench/results/h100/e2e/session4_w8a8/gemv_bench.py OUT.json

1. Per Llama-3-8B projection shape, each `gemv_i8` tiling: a graph of COPIES calls over distinct weights
   (COPIES x the bytes > L2, as 32 layers are), replayed; us per call and GB/s of weight bytes. Outputs are
   checked equal (bit for bit) to the before-kernel's on the same inputs.
2. The W8A8 layer's launch sequence without attention (norm+quant, qkv, o, norm+quant, gate_up,
   down with silu, norm+quant) over LAYERS distinct layers in one graph: us per layer, before vs now
   without PDL vs now with PDL, and now with PDL and the fastest tiling per shape from 1.
3. The norm alone (64 launches per graph), and the fp16 GEMV (lm_head) before vs now.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

import compress.runtime.decode_kernels as new

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("decode_kernels_before", HERE / "decode_kernels_before.py")
old = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(old)

SMOKE = not torch.cuda.is_available()  # CPU: tiny shapes in Triton's interpreter, wall-clock "timings" (script check)
DEV = torch.device("cpu" if SMOKE else "cuda")
DT = torch.float16
# name: (N, K, how the activations arrive). pre: int8 codes from the norm; xf: fp16, quantized in the GEMV;
# silu: [gate | up] fp16, silu * up and its quantization in the GEMV (the down projection).
SHAPES = {"qkv": (6144, 4096, "pre"), "o": (4096, 4096, "xf"), "gate_up": (28672, 4096, "pre"),
          "down": (4096, 14336, "silu")}
HIDDEN = 4096
if SMOKE:
    SHAPES = {"qkv": (48, 64, "pre"), "o": (64, 64, "xf"), "gate_up": (96, 64, "pre"), "down": (64, 48, "silu")}
    HIDDEN = 64
# The session-3 path table's choices on the H100 (bench/results/h100/e2e/session3/final/llama-3-8b/e2e.md).
BEFORE_CFG = {"qkv": (32, 128, 4), "o": (16, 256, 4), "gate_up": (16, 256, 4), "down": (16, 512, 8)}
CONFIGS = [(16, 256, 4), (32, 128, 4), (16, 512, 8), (8, 512, 4), (32, 256, 8), (64, 128, 8), (8, 256, 2)]
COPIES, LAYERS, REPS = (2, 2, 1) if SMOKE else (8, 8, 20)


def set_pdl(on: bool) -> None:
    os.environ["COMPRESS_DECODE_PDL"] = "1" if on else "0"


def graph_us(fn, reps: int = REPS) -> float:
    """Microseconds of one fn() as a CUDA-graph replay (median of 5 timings of `reps` replays)."""
    if SMOKE:
        import time
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # compile / warm up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / reps)
    return sorted(out)[2]


def make_inputs(n: int, k: int, kind: str, copies: int, gen: torch.Generator):
    ws = [torch.randint(-127, 128, (n, k), device=DEV, dtype=torch.int8, generator=gen) for _ in range(copies)]
    ss = [(torch.rand(n, device=DEV, generator=gen) * 1e-4 + 1e-5) for _ in range(copies)]
    width = 2 * k if kind == "silu" else k
    x = (torch.randn(1, width, device=DEV, generator=gen) * 2).to(DT)
    xq = torch.randint(-127, 128, (1, k), device=DEV, dtype=torch.int8, generator=gen)
    xs = torch.rand(1, device=DEV, generator=gen) * 0.1
    return ws, ss, x, xq, xs


def gemv_call(mod, kind, x, xq, xs, w, s, cfg):
    if kind == "pre":
        return mod.gemv_i8(xq, xs, w, s, DT, cfg)
    return mod.gemv_i8(x, None, w, s, DT, cfg, silu_mul=kind == "silu")


def sweep(gen) -> dict:
    res = {}
    for name, (n, k, kind) in SHAPES.items():
        ws, ss, x, xq, xs = make_inputs(n, k, kind, COPIES, gen)
        ref = [gemv_call(old, kind, x, xq, xs, w, s, BEFORE_CFG[name]) for w, s in zip(ws, ss)]
        row = {}
        variants = [("before " + "%dx%d_w%d" % BEFORE_CFG[name], old, BEFORE_CFG[name], False)]
        variants += [("now " + "%dx%d_w%d" % c + (" pdl" if p else ""), new, c, p) for c in CONFIGS for p in (False, True)
                     if p or c == BEFORE_CFG[name]]
        for label, mod, cfg, pdl in variants:
            set_pdl(pdl)
            try:
                outs = [gemv_call(mod, kind, x, xq, xs, w, s, cfg) for w, s in zip(ws, ss)]
                same = all(torch.equal(a, b) for a, b in zip(outs, ref))
                us = graph_us(lambda: [gemv_call(mod, kind, x, xq, xs, w, s, cfg) for w, s in zip(ws, ss)]) / COPIES
            except Exception as e:  # a tiling that does not compile (registers) is reported, not fatal
                row[label] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
                print(f"{name:8s} {label:28s} FAILED {row[label]['error']}", flush=True)
                continue
            row[label] = {"us": round(us, 2), "gbs": round(n * k / us / 1e3, 0), "equal_to_before": same}
            print(f"{name:8s} {label:28s} {us:8.2f} us  {n * k / us / 1e3:6.0f} GB/s  equal={same}", flush=True)
        # Issue 3's reference: torch fp16 F.linear at M = 1 on the same shape, same graph method.
        whs = [torch.randn(n, k, device=DEV, generator=gen).to(DT) for _ in range(COPIES)]
        xh = x[:, :k].contiguous()
        us = graph_us(lambda: [torch.nn.functional.linear(xh, wh) for wh in whs]) / COPIES
        row["torch fp16 F.linear"] = {"us": round(us, 2), "gbs": round(2 * n * k / us / 1e3, 0)}
        print(f"{name:8s} {'torch fp16 F.linear':28s} {us:8.2f} us  {2 * n * k / us / 1e3:6.0f} GB/s", flush=True)
        res[name] = row
        del ws, ss, whs
        torch.cuda.empty_cache()
    set_pdl(True)
    return res


def sweep_fp16(gen) -> dict:
    """The fp16 GEMV (lm_head 128256 x 4096 of every format; all layers of fp16 models), before vs now."""
    res = {}
    shapes = {"lm_head": (128256, 4096), "down_fp16": (4096, 14336)}
    if SMOKE:
        shapes = {"lm_head": (40, 64), "down_fp16": (24, 96)}
    for name, (n, k) in shapes.items():
        copies = 2 if name == "lm_head" else COPIES
        ws = [(torch.randn(n, k, device=DEV, generator=gen) * 0.02).to(DT) for _ in range(copies)]
        x = torch.randn(1, k, device=DEV, generator=gen).to(DT)
        row = {}
        ref = None
        for c in new.GEMV_CONFIGS:
            for label, mod, pdl in (("before", old, False), ("now", new, False), ("now pdl", new, True)):
                set_pdl(pdl)
                lab = f"{label} {c[0]}x{c[1]}_w{c[2]}"
                try:
                    outs = [mod.gemv(x, w, c) for w in ws]
                    ref = outs if ref is None else ref
                    same = all(torch.equal(a, b) for a, b in zip(outs, ref))
                    us = graph_us(lambda: [mod.gemv(x, w, c) for w in ws]) / copies
                except Exception as e:
                    row[lab] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
                    print(f"{name:9s} {lab:24s} FAILED {row[lab]['error']}", flush=True)
                    continue
                row[lab] = {"us": round(us, 2), "gbs": round(2 * n * k / us / 1e3, 0), "equal_to_first": same}
                print(f"{name:9s} {lab:24s} {us:8.2f} us  {2 * n * k / us / 1e3:6.0f} GB/s  equal={same}", flush=True)
        res[name] = row
        del ws
        torch.cuda.empty_cache()
    set_pdl(True)
    return res


def best_configs(res: dict) -> dict:
    best = {}
    for name, row in res.items():
        cands = [(v["us"], k) for k, v in row.items() if k.startswith("now ") and k.endswith(" pdl") and "us" in v
                 and v["equal_to_before"]]
        if not cands:
            best[name] = BEFORE_CFG[name]
            continue
        us, label = min(cands)
        c = label.split()[1]
        bn, rest = c.split("x")
        bw, warps = rest.split("_w")
        best[name] = (int(bn), int(bw), int(warps))
    return best


def layer_sequence(gen, cfgs_by_variant: dict) -> dict:
    """One graph of LAYERS W8A8 layers' launches (no attention: the o projection reads a fixed row)."""
    hidden = HIDDEN
    layers = []
    for _ in range(LAYERS):
        layer = {}
        for name, (n, k, kind) in SHAPES.items():
            layer[name] = (torch.randint(-127, 128, (n, k), device=DEV, dtype=torch.int8, generator=gen),
                           torch.rand(n, device=DEV, generator=gen) * 2e-4 + 1e-4)
        layer["norms"] = [torch.rand(hidden, device=DEV, generator=gen).to(DT) + 0.5 for _ in range(2)]
        layers.append(layer)
    x0 = torch.randn(1, hidden, device=DEV, generator=gen).to(DT)
    attn = torch.randn(1, hidden, device=DEV, generator=gen).to(DT)

    def run(mod, cfg):
        x = x0
        _, h, hq = mod.add_rms_norm(x, None, layers[0]["norms"][0], 1e-5, quant=True)
        for i, L in enumerate(layers):
            qkv = mod.gemv_i8(hq[0], hq[1], *L["qkv"], DT, cfg["qkv"])
            o = mod.gemv_i8(attn, None, *L["o"], DT, cfg["o"])  # (qkv feeds attention, not run here)
            x, h, hq = mod.add_rms_norm(x, o, L["norms"][1], 1e-5, quant=True)
            gu = mod.gemv_i8(hq[0], hq[1], *L["gate_up"], DT, cfg["gate_up"])
            d = mod.gemv_i8(gu, None, *L["down"], DT, cfg["down"], silu_mul=True)
            nxt = layers[(i + 1) % LAYERS]["norms"][0]
            x, h, hq = mod.add_rms_norm(x, d, nxt, 1e-5, quant=True)
        return x

    out = {}
    ref = None
    for label, (mod, cfg, pdl) in cfgs_by_variant.items():
        set_pdl(pdl)
        try:
            y = run(mod, cfg)
            if ref is None:
                ref = y
            same = bool(torch.equal(y, ref))
            us = graph_us(lambda: run(mod, cfg), reps=10) / LAYERS
        except Exception as e:  # reported, and the other variants still run
            out[label] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            print(f"layer    {label:40s} FAILED {out[label]['error']}", flush=True)
            continue
        out[label] = {"us_per_layer": round(us, 2), "equal_to_first": same}
        print(f"layer    {label:40s} {us:8.2f} us/layer  (x32 = {us * 32 / 1e3:.3f} ms)  equal={same}", flush=True)
    set_pdl(True)
    return out


def norm_only(gen) -> dict:
    """64 residual add + RMSNorm launches in one graph, with and without the int8 output."""
    n = HIDDEN
    xs = [torch.randn(1, n, device=DEV, generator=gen).to(DT) for _ in range(2)]
    w = torch.rand(n, device=DEV, generator=gen).to(DT) + 0.5
    out = {}
    for label, mod, quant, pdl in [("before quant", old, True, False), ("before plain", old, False, False),
                                   ("now quant", new, True, False), ("now quant pdl", new, True, True),
                                   ("now plain pdl", new, False, True)]:
        set_pdl(pdl)

        def run():
            x = xs[0]
            for _ in range(2 if SMOKE else 64):
                x = mod.add_rms_norm(x, xs[1], w, 1e-5, quant=quant)[0]
            return x
        try:
            us = graph_us(run, reps=10) / (2 if SMOKE else 64)
        except Exception as e:
            out[label] = f"{type(e).__name__}: {str(e)[:200]}"
            print(f"norm     {label:20s} FAILED {out[label]}", flush=True)
            continue
        out[label] = round(us, 2)
        print(f"norm     {label:20s} {us:6.2f} us/call", flush=True)
    # num_warps of the quantizing norm (one program per row; add_rms_norm launches it with 8 at N = 4096)
    kernel, opts = new._pick(new._add_rms_norm, new._add_rms_norm_pdl, DEV)
    q = torch.empty(1, n, dtype=torch.int8, device=DEV)
    qs = torch.empty(1, dtype=torch.float32, device=DEV)
    for warps in (4, 8, 16):
        bufs = [torch.empty_like(xs[0]) for _ in range(4)]

        def run():
            for i in range(2 if SMOKE else 64):
                x, s_out, h = (xs[0] if i == 0 else bufs[i % 2]), bufs[(i + 1) % 2], bufs[2 + i % 2]
                kernel[(1,)](x, xs[1], w, s_out, h, q, qs, 1e-5, N=n, BLOCK=n, HAS_Y=True, QUANT=True,
                             num_warps=warps, **opts)
        try:
            us = graph_us(run, reps=10) / (2 if SMOKE else 64)
        except Exception as e:
            print(f"norm     {warps} warps FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        out[f"now quant pdl, {warps} warps"] = round(us, 2)
        print(f"norm     now quant pdl, {warps:2d} warps {us:6.2f} us/call", flush=True)
    return out


def main() -> None:
    path = Path(sys.argv[1])
    gen = torch.Generator(device=DEV).manual_seed(0)
    doc = {"device": "cpu (smoke)" if SMOKE else torch.cuda.get_device_name(), "torch": torch.__version__}
    doc["norm"] = norm_only(gen)
    doc["sweep"] = sweep(gen)
    path.write_text(json.dumps(doc, indent=1))
    best = best_configs(doc["sweep"])
    doc["best"] = {k: "%dx%d_w%d" % v for k, v in best.items()}
    print("fastest tiling per shape (now, PDL):", doc["best"], flush=True)
    path.write_text(json.dumps(doc, indent=1))
    doc["layer"] = layer_sequence(gen, {
        "before (session-3 tilings)": (old, BEFORE_CFG, False),
        "now, no PDL (same tilings)": (new, BEFORE_CFG, False),
        "now, PDL (same tilings)": (new, BEFORE_CFG, True),
        "now, PDL, fastest tilings": (new, best, True),
    })
    path.write_text(json.dumps(doc, indent=1))
    doc["fp16_gemv"] = sweep_fp16(gen)
    path.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
