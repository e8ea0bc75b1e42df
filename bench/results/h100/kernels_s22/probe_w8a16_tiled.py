"""Session 22 probe (developer tool, GPU): the tiled W8A16 GEMM (`compress.runtime.w8a16_prefill.gemm_w8_tiled`)
over a sweep of tilings on synthetic Llama-3-8B layer shapes (int8, group 128, fp16 activations) from 32 to 8192
rows, each checked against its reference and timed next to torch fp16 F.linear, the dequantize + cuBLAS path the
runtime took above 64 rows before it, and (up to 64 rows) the few-row kernel's best tiling, by the tables'
"rotate" method (compress.bench.kernel_timing).

    python bench/results/h100/kernels_s22/probe_w8a16_tiled.py > probe.log    (JSON rows: PROBE_JSON=path)
"""

from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import call_ms
from compress.runtime.decode_kernels import GEMM_W8_CONFIGS, GEMM_W8_MAX_M, dequant_w8, gemm_w8, gemm_w8_fits
from compress.runtime.w8a16_prefill import TILED_W8_CONFIGS, gemm_w8_tiled, gemm_w8_tiled_ref

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
MS = [int(m) for m in os.environ.get("MS", "64,256,1024,2048,8192").split(",")]
# Extra tilings beside TILED_W8_CONFIGS: SWEEP="bn,bm,bk,warps,stages;...". Calls 1-4's sweeps are in the README
# beside this file (call 4's x-first tilings need 5705aab, where a sixth field 0 put x on the left).
SWEEP = tuple(dict.fromkeys(TILED_W8_CONFIGS + tuple(
    tuple(int(v) for v in c.split(",")) for c in os.environ.get("SWEEP", "").split(";") if c)))


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30))


def us(fn, weights) -> float:
    try:
        return 1000 * call_ms(fn, weights)
    except Exception as e:  # a tiling that does not compile or launch is reported, not fatal
        print(f"    failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
        return float("inf")


def main():
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, (n, k) in SHAPES.items():
        q = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8, generator=g)
        s = (torch.rand(n, k // 128, device="cuda", generator=g) * 0.01 + 1e-3).half()
        w16 = dequant_w8(q, s, None, torch.float16)
        for m in MS:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
            ref = gemm_w8_tiled_ref(x, q, s, 128)
            row = {"layer": name, "n": n, "k": k, "m": m,
                   "fp16_us": us(lambda w: F.linear(x, w), w16),
                   "dequant_cublas_us": us(lambda w: F.linear(x, dequant_w8(w[0], w[1], None, x.dtype)), (q, s)),
                   "few_row_us": float("inf"), "tiled": {}}
            if m <= GEMM_W8_MAX_M:
                row["few_row_us"] = min(us(lambda w, c=c: gemm_w8(x, w[0], w[1], 128, c), (q, s))
                                        for c in GEMM_W8_CONFIGS if gemm_w8_fits(k, 128, c))
            for cfg in SWEEP:
                try:
                    err = rel(gemm_w8_tiled(x, q, s, 128, cfg), ref)
                except Exception as e:
                    print(f"  {name} m={m} {cfg}: failed {type(e).__name__}: {str(e)[:160]}", flush=True)
                    continue
                t = us(lambda w, c=cfg: gemm_w8_tiled(x, w[0], w[1], 128, c), (q, s))
                row["tiled"]["%dx%dx%d_w%d_s%d" % cfg] = {"us": t, "rel_err": err}
            best = min(row["tiled"].items(), key=lambda kv: kv[1]["us"]) if row["tiled"] else ("-", {"us": float("inf")})
            served = min(row["dequant_cublas_us"], row["few_row_us"])
            tflops = 2 * m * n * k / best[1]["us"] / 1e6
            print(f"{name:8s} m={m:5d} fp16 {row['fp16_us']:8.1f}  dequant+cuBLAS {row['dequant_cublas_us']:8.1f}  "
                  f"few-row {row['few_row_us']:7.1f}  tiled best {best[1]['us']:8.1f} ({best[0]}, {tflops:.0f} TFLOP/s)"
                  f"  best before / tiled {served / best[1]['us']:.2f}x  fp16 / tiled {row['fp16_us'] / best[1]['us']:.2f}x",
                  flush=True)
            for c, v in row["tiled"].items():
                print(f"    {c:22s} {v['us']:8.1f} us  rel err {v['rel_err']:.1e}", flush=True)
            rows.append(row)
    if os.environ.get("PROBE_JSON"):
        with open(os.environ["PROBE_JSON"], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
