"""Session 14: 2:4 layers above 16 tokens. The runtime served them at 0.11-0.42x of dense fp16 (session 12's table):
its "dequantize, then the dense GEMM" paths spent most of their time in torch's scatter, and the expand-to-dense
tensor-core kernel (kernels/sparse24.py `_sparse24_mma_kernel`) ran 6-12x slower than a read of its bytes. Per shape
and M, each timed by compress.bench.kernel_timing.checked_call_us (rotating weights, quantizer inside the call):
- fp16 dense F.linear, and our dense W8A8 (kernels.w8a8) on the int8 weight of the same shape;
- `densify_sparse24` alone (the new one-launch dense weight), and densify + the dense GEMM (fp16: F.linear; int8: our
  W8A8), what the runtime's dequant paths now run;
- the mma kernel with the served config and the variants below (int8: "xq", x quantized once before the kernel).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s14/sp24_sweep.py OUT  (env SP_MS, SP_SHAPES;
SP_DENSE_ONLY=1: the densify and dense rows only, no mma kernel arms -- calls 7-8)
-> OUT/sp24_sweep.json and one line per row.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = [(int(s.split("x")[0]), int(s.split("x")[1])) for s in os.environ.get(
    "SP_SHAPES", "4096x4096,1024x4096,14336x4096,4096x14336,8192x8192,1024x8192,28672x8192,8192x28672").split(",")]
MS = tuple(int(v) for v in os.environ.get("SP_MS", "16,32,64,256,1024").split(","))
MMA = {"kind": "mma"}
INT8 = {"x64n128k128": dict(MMA, BM=64, BN=128, BK=128, num_warps=8, num_stages=4, m_fast=True, fit=1, xq=True),
        "x64n128k64": dict(MMA, BM=64, BN=128, BK=64, num_warps=8, num_stages=4, m_fast=True, fit=1, xq=True),
        "x16n64k128": dict(MMA, BM=16, BN=64, BK=128, num_warps=4, num_stages=4, m_fast=True, fit=1, xq=True),
        "x32n128k128": dict(MMA, BM=32, BN=128, BK=128, num_warps=8, num_stages=3, m_fast=True, fit=1, xq=True)}
FP16 = {"f64n128k64": dict(MMA, BM=64, BN=128, BK=64, num_warps=8, num_stages=3, m_fast=True, fit=1),
        "f16n64k128": dict(MMA, BM=16, BN=64, BK=128, num_warps=4, num_stages=3, fit=1),
        "f32n128k64": dict(MMA, BM=32, BN=128, BK=64, num_warps=8, num_stages=3, m_fast=True, fit=1)}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    from compress.bench import kernel_timing as kt
    from kernels.cases import make_sparse24, make_w8a8
    from kernels.sparse24 import _config, _launch, densify_sparse24, sparse24_linear_ref, sparse24_w8a8_linear_ref
    from kernels.w8a8 import w8a8_linear, w8a8_linear_ref

    t0 = time.time()
    rows = []
    for n, k in SHAPES:
        p8 = make_sparse24(n, k, torch.int8, "cuda", seed=n + k)
        p16 = make_sparse24(n, k, torch.float16, "cuda", seed=n + k)
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        w16 = torch.randn(n, k, device="cuda").half()
        r0 = {"n": n, "k": k}
        # calls 6-8 timed three densify kernels in turn (commits afab27f and its successor; call 8 two in one process:
        # "densify_*" the per-group one, "densify_*_rows" the whole-word one kept in kernels/sparse24.py)
        r0["densify_i8_us"] = kt.call_ms(lambda p: densify_sparse24(p["values"], p["meta"], k), p8) * 1000
        r0["densify_f16_us"] = kt.call_ms(lambda p: densify_sparse24(p["values"], p["meta"], k), p16) * 1000
        for m in MS:
            x = torch.randn(m, k, device="cuda").half()
            r = dict(r0, m=m, t={})
            r["fp16"] = kt.call_ms(lambda w_: F.linear(x, w_), w16) * 1000
            r["t"]["w8a8_dense"] = kt.checked_call_us(lambda p: w8a8_linear(x, p[0], p[1]), (wq, ws), w8a8_linear_ref(x, wq, ws), tol=3e-3)["us"]
            want8 = sparse24_w8a8_linear_ref(x, p8["values"], p8["meta"], p8["w_scale"])
            want16 = sparse24_linear_ref(x, p16["values"], p16["meta"])
            r["t"]["i8_densify+w8a8"] = kt.checked_call_us(
                lambda p: w8a8_linear(x, densify_sparse24(p["values"], p["meta"], k), p["w_scale"]), p8, want8, tol=3e-3)["us"]
            r["t"]["f16_densify+cublas"] = kt.checked_call_us(
                lambda p: F.linear(x, densify_sparse24(p["values"], p["meta"], k)), p16, want16, tol=3e-3)["us"]
            dense_only = os.environ.get("SP_DENSE_ONLY") == "1"
            for name, cfg in [] if dense_only else [("i8_served", _config(m, True))] + list(INT8.items()):
                try:
                    r["t"][name] = kt.checked_call_us(lambda p, c=cfg: _launch(x, p["values"], p["meta"], p["w_scale"], c),
                                                      p8, want8, tol=3e-3)["us"]
                except Exception as e:
                    r["t"][name] = None
                    print(f"  {name} failed: {str(e)[:120]}", flush=True)
            for name, cfg in [] if dense_only else [("f16_served", _config(m, False))] + list(FP16.items()):
                try:
                    r["t"][name] = kt.checked_call_us(lambda p, c=cfg: _launch(x, p["values"], p["meta"], None, c),
                                                      p16, want16, tol=3e-3)["us"]
                except Exception as e:
                    r["t"][name] = None
                    print(f"  {name} failed: {str(e)[:120]}", flush=True)
            rows.append(r)
            print(f"[{time.time() - t0:5.1f} s] {n}x{k} M={m}: fp16 {r['fp16']:.1f} densify i8/f16 "
                  f"{r['densify_i8_us']:.1f}/{r['densify_f16_us']:.1f} | "
                  + " ".join(f"{key} {us:.1f}" if us else f"{key} -" for key, us in r["t"].items()), flush=True)
            with open(f"{out}/sp24_sweep.json", "w") as f:
                json.dump(rows, f, indent=1, default=str)
        del p8, p16, wq, ws, w16
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
