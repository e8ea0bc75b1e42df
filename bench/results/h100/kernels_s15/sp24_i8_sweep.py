"""Session 15: the 2:4 int8 one-token GEMV (kernels/sparse24.py `_sparse24_gemv_i_kernel`, config kind "prmt",
"fused": x quantized in every program) with and without "ring" (two weight tiles in flight, the first two requested
before the absmax prologue), over tile shapes, against the dense W8A8 one-token paths, on the 8 Llama-3 shapes.

Per shape and M (SP_MS, default 1), each timed by compress.bench.kernel_timing.checked_call_us (rotating weights,
activation quantization inside every call):
- fp16 F.linear (base of the kernel table's ratios);
- dense W8A8: the runtime's one-token int8 GEMV (compress/runtime/decode_kernels.py `gemv_i8`, x quantized inside)
  in each of its GEMV_I8_CONFIGS (the fastest is the table's dense side at one token), and kernels.w8a8's own path;
- 2:4 int8: "served" (kernels.sparse24._config), each variant below merged over it, and the CUDA mma.sp GEMV
  (kernels/i8_gemv.py, path "cuda_sp24").
Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s15/sp24_i8_sweep.py OUT  (env SP_MS,
SP_SHAPES, SP_DTYPES (int8 and / or fp16, whose base is dense fp16), SP_VARIANTS='{"name": {config keys}}' for int8)
-> OUT/sp24_i8_sweep.json and one line per row.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F

SHAPES = [(int(s.split("x")[0]), int(s.split("x")[1])) for s in os.environ.get(
    "SP_SHAPES", "4096x4096,1024x4096,14336x4096,4096x14336,8192x8192,1024x8192,28672x8192,8192x28672").split(",")]
MS = tuple(int(v) for v in os.environ.get("SP_MS", "1").split(","))
VARIANTS = {"ring": {"ring": True},
            "ring_v1": {"ring": True, "waves": 1},
            "ring_v4": {"ring": True, "waves": 4},
            "ring_s1": {"ring": True, "split": 1},
            "ring_n16x4": {"ring": True, "BN": 16, "num_warps": 4},
            "ring_n16w32x4": {"ring": True, "BN": 16, "BW": 32, "num_warps": 4},
            "ring_n32w8": {"ring": True, "BW": 8},
            "ring_n32w32": {"ring": True, "BW": 32},
            "ring_n64x8": {"ring": True, "BN": 64},
            "ring_n8w32x4": {"ring": True, "BN": 8, "BW": 32, "num_warps": 4},
            "v1": {"waves": 1}, "v4": {"waves": 4}}
# fp16 values (SP_DTYPES=int8,fp16): the PRMT GEMV that serves one token (16 x 8 words on 4 warps, 4 waves)
FP16_VARIANTS = {"ring": {"ring": True}, "ring_v2": {"ring": True, "waves": 2}, "ring_w16": {"ring": True, "BW": 16},
                 "ring_n32x8": {"ring": True, "BN": 32, "num_warps": 8}, "ring_s1": {"ring": True, "split": 1},
                 "ring_n32w16x8v2": {"ring": True, "BN": 32, "BW": 16, "num_warps": 8, "waves": 2}}
DTYPES = os.environ.get("SP_DTYPES", "int8").split(",")
if os.environ.get("SP_VARIANTS"):
    VARIANTS = json.loads(os.environ["SP_VARIANTS"])


def _arms(m, int8=True):
    from kernels.sparse24 import _config
    served = _config(m, int8)
    return {"served": served} | {name: dict(served, **v) for name, v in (VARIANTS if int8 else FP16_VARIANTS).items()}


def _warm(job):
    """Compile one (config, shape) in a worker: X_FLOAT kernels take K as a constexpr, one build per K."""
    cfg, n, k, m, dt = job
    from kernels.cases import make_sparse24
    from kernels.sparse24 import _launch
    p = make_sparse24(min(n, 256), k, torch.int8 if dt == "int8" else torch.float16, "cuda", seed=1)
    x = torch.randn(m, k, device="cuda").half()
    try:
        _launch(x, p["values"], p["meta"], p["w_scale"], cfg)
        torch.cuda.synchronize()
        return "ok"
    except Exception as e:
        return f"FAILED {json.dumps(cfg)} K={k}: {str(e)[:120]}"


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    import multiprocessing as mp
    jobs = [(cfg, 256, k, m, dt) for dt in DTYPES for m in MS for cfg in _arms(m, dt == "int8").values()
            for k in sorted({k for _, k in SHAPES})]
    with ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
        res = list(pool.map(_warm, jobs))
    print(f"[{time.time() - t0:5.1f} s] warm: {sum(r == 'ok' for r in res)} ok; "
          + "; ".join(r for r in res if r != "ok"), flush=True)

    from compress.bench import kernel_timing as kt
    from compress.runtime.decode_kernels import GEMV_I8_CONFIGS, gemv_i8
    from kernels import i8_gemv
    from kernels.cases import make_sparse24, make_w8a8
    from kernels.sparse24 import _launch, sparse24_linear_ref, sparse24_w8a8_linear_ref
    from kernels.w8a8 import w8a8_linear, w8a8_linear_ref

    rows = []
    for n, k in SHAPES:
        w16 = torch.randn(n, k, device="cuda").half()
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        for dt in DTYPES:
            int8 = dt == "int8"
            p = make_sparse24(n, k, torch.int8 if int8 else torch.float16, "cuda", seed=n + k)
            if int8:
                p["frag"] = i8_gemv.pack_meta_fragments(p["meta"], n, k)
            for m in MS:
                x = torch.randn(m, k, device="cuda").half()
                r = {"n": n, "k": k, "m": m, "dtype": dt, "t": {}, "dense": {}}
                r["fp16"] = kt.call_ms(lambda w_: F.linear(x, w_), w16) * 1000
                if int8:
                    dref = w8a8_linear_ref(x, wq, ws)
                    if m == 1:
                        for c in GEMV_I8_CONFIGS:
                            r["dense"]["gemv_i8_%dx%d_w%d" % c] = kt.checked_call_us(
                                lambda q, c=c: gemv_i8(x, None, q[0], q[1], x.dtype, c), (wq, ws), dref, tol=3e-3)["us"]
                    r["dense"]["w8a8"] = kt.checked_call_us(lambda q: w8a8_linear(x, q[0], q[1]), (wq, ws), dref,
                                                            tol=3e-3)["us"]
                    want = sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])
                else:
                    r["dense"]["fp16"] = r["fp16"]
                    want = sparse24_linear_ref(x, p["values"], p["meta"])
                for name, cfg in _arms(m, int8).items():
                    got = kt.checked_call_us(lambda q, c=cfg: _launch(x, q["values"], q["meta"], q.get("w_scale"), c), p,
                                             want, tol=3e-3)
                    r["t"][name] = got["us"]
                    if got.get("error"):
                        print(f"  {name}: {got['error'][:150]}", flush=True)
                if int8 and i8_gemv.supports(x, p["values"], p["w_scale"], p["frag"]):
                    r["t"]["cuda_sp24"] = kt.checked_call_us(
                        lambda q: i8_gemv.sparse24_w8a8_gemv(x, q["values"], q["frag"], q["w_scale"]), p, want,
                        tol=3e-3)["us"]
                dense = min(r["dense"].values())
                best = min(r["t"], key=r["t"].get)
                r["over_dense"] = {a: dense / us for a, us in r["t"].items()}
                rows.append(r)
                print(f"[{time.time() - t0:5.1f} s] {dt} {n}x{k} M={m}: fp16 {r['fp16']:.1f} dense {dense:.1f} | "
                      + " ".join(f"{a} {us:.1f}" for a, us in r["t"].items())
                      + f" | best {best} {dense / r['t'][best]:.2f}x of dense, served {dense / r['t']['served']:.2f}x",
                      flush=True)
                with open(f"{out}/sp24_i8_sweep.json", "w") as f:
                    json.dump(rows, f, indent=1, default=str)
            del p
        del w16, wq, ws
        torch.cuda.empty_cache()
    import statistics
    for dt in DTYPES:
        for m in MS:
            sel = [r for r in rows if r["m"] == m and r["dtype"] == dt]
            if sel:
                med = {a: statistics.median(r["over_dense"][a] for r in sel if a in r["over_dense"]) for a in sel[0]["t"]}
                print(f"{dt} M={m} median over dense ({'W8A8' if dt == 'int8' else 'fp16'}): "
                      + " ".join(f"{a} {v:.3f}" for a, v in sorted(med.items(), key=lambda t: -t[1])), flush=True)

if __name__ == "__main__":
    main()
