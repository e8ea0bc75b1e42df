"""Session 14: the 2:4 tensor-core GEMM that widens whole meta / value words in registers (kernels/sparse24.py
`_sparse24_tc_kernel`, config kind "tc") against what serves 2:4 layers at 2..64 tokens now, on the 8 Llama-3 shapes.
Per shape, M and values dtype (fp16; int8 with x quantized once), each timed by compress.bench.kernel_timing's
checked_call_us (rotating weights, quantizer inside the call):
- dense fp16 F.linear (the ratio's base) and, for int8, our dense W8A8 (kernels.w8a8, same M);
- "served": kernels.sparse24's own config at that M (prmt GEMV up to 4 tokens, the expand kernel above) and densify +
  the dense GEMM (what the runtime's path table picked above 4 tokens in call 7's table); the CUDA mma.sp GEMV that
  serves int8 up to 64 tokens is in the kernel table, not here;
- each "tc" config below (BM = the token tile, at least 16).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s14/sp24_tc_sweep.py OUT  (env TC_MS,
TC_SHAPES, TC_DTYPES, TC_SET, TC_VARIANTS) -> OUT/sp24_tc_sweep.json and one line per row.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton

SHAPES = [(int(s.split("x")[0]), int(s.split("x")[1])) for s in os.environ.get(
    "TC_SHAPES", "4096x4096,1024x4096,14336x4096,4096x14336,8192x8192,1024x8192,28672x8192,8192x28672").split(",")]
MS = tuple(int(v) for v in os.environ.get("TC_MS", "2,4,8,16,32,64").split(","))
DTYPES = os.environ.get("TC_DTYPES", "fp16,int8").split(",")
TC = {"n64w4": dict(BN=64, BW=4, num_warps=4, num_stages=3, fit=1),
      "n128w4": dict(BN=128, BW=4, num_warps=8, num_stages=3, fit=1),
      "n128w2s4": dict(BN=128, BW=2, num_warps=8, num_stages=4, fit=1),
      "n64w8": dict(BN=64, BW=8, num_warps=4, num_stages=3, fit=1),
      "n64w4f2": dict(BN=64, BW=4, num_warps=4, num_stages=4, fit=2),
      "n128w4v2": dict(BN=128, BW=4, num_warps=8, num_stages=3)}
# Call 10 (TC_SET=2): around call 9's winner n64w8, the served config since (deeper pipeline, 8 warps, other tile
# widths, two programs per SM; 512-column steps spilled in the sm_90 build and were left out)
if os.environ.get("TC_SET") == "2":
    TC = {"n64w8": dict(BN=64, BW=8, num_warps=4, num_stages=3, fit=1),
          "n64w8s4": dict(BN=64, BW=8, num_warps=4, num_stages=4, fit=1),
          "n64w8x8": dict(BN=64, BW=8, num_warps=8, num_stages=3, fit=1),
          "n32w8": dict(BN=32, BW=8, num_warps=4, num_stages=3, fit=1),
          "n128w8x8": dict(BN=128, BW=8, num_warps=8, num_stages=3, fit=1),
          "n64w8f2": dict(BN=64, BW=8, num_warps=4, num_stages=3, fit=2)}

# Session 15 (bench/results/h100/kernels_s15/run.sh): TC_VARIANTS='{"name": {config keys}}' replaces the set; a
# variant with "_served": true is the served config at that M with its other keys on top (e.g. "expand": "select");
# a "BM" key sets the token tile (else the next power of two >= M, at least 16).
if os.environ.get("TC_VARIANTS"):
    TC = json.loads(os.environ["TC_VARIANTS"])


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
        w16 = torch.randn(n, k, device="cuda").half()
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        for dt in DTYPES:
            int8 = dt == "int8"
            p = make_sparse24(n, k, torch.int8 if int8 else torch.float16, "cuda", seed=n + k)
            for m in MS:
                x = torch.randn(m, k, device="cuda").half()
                r = {"n": n, "k": k, "m": m, "dtype": dt, "t": {}}
                r["fp16"] = kt.call_ms(lambda w_: F.linear(x, w_), w16) * 1000
                if int8:
                    want = sparse24_w8a8_linear_ref(x, p["values"], p["meta"], p["w_scale"])
                    r["t"]["w8a8_dense"] = kt.checked_call_us(lambda q: w8a8_linear(x, q[0], q[1]), (wq, ws),
                                                              w8a8_linear_ref(x, wq, ws), tol=3e-3)["us"]
                    dense = lambda q: w8a8_linear(x, densify_sparse24(q["values"], q["meta"], k), q["w_scale"])  # noqa: E731
                else:
                    want = sparse24_linear_ref(x, p["values"], p["meta"])
                    dense = lambda q: F.linear(x, densify_sparse24(q["values"], q["meta"], k))  # noqa: E731
                r["t"]["densify+dense"] = kt.checked_call_us(dense, p, want, tol=3e-3)["us"]
                arms = {"served": _config(m, int8)} | {
                    name: ({k_: v_ for k_, v_ in (_config(m, int8) | cfg).items() if k_ != "_served"} if cfg.get("_served")
                           else dict({"BM": max(16, triton.next_power_of_2(m))} | cfg, kind="tc")) for name, cfg in TC.items()}
                for name, cfg in arms.items():
                    got = kt.checked_call_us(lambda q, c=cfg: _launch(x, q["values"], q["meta"], q.get("w_scale"), c), p,
                                             want, tol=3e-3)
                    r["t"][name] = got["us"]
                    if got.get("error"):
                        print(f"  {name}: {got['error'][:150]}", flush=True)
                rows.append(r)
                best = min((kk for kk in r["t"] if kk != "w8a8_dense"), key=r["t"].get)
                print(f"[{time.time() - t0:5.1f} s] {dt} {n}x{k} M={m}: fp16 {r['fp16']:.1f} | "
                      + " ".join(f"{kk} {us:.1f}" for kk, us in r["t"].items())
                      + f" | best {best} {r['fp16'] / r['t'][best]:.2f}x of fp16", flush=True)
                with open(f"{out}/sp24_tc_sweep.json", "w") as f:
                    json.dump(rows, f, indent=1, default=str)
            del p
        del w16, wq, ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
