"""Session 21 probe (developer tool, GPU): tile sweeps for the few-token VPTQ kernel (`kernels.vptq.vptq_gemm`)
and the W8A16 few-row kernel (`compress.runtime.decode_kernels.gemm_w8`) on synthetic Llama-3-8B layer shapes,
each candidate checked against its reference and timed next to torch fp16 F.linear and the path the runtime
would otherwise take, by the tables' "rotate" method (compress.bench.kernel_timing).

    python bench/results/h100/kernels_s21/probe.py vptq w8a16 > probe.log    (JSON rows: PROBE_JSON=path)
"""

from __future__ import annotations

import itertools
import json
import os
import sys

import torch
import torch.nn.functional as F

from compress.bench.e2e_synthetic import random_vptq
from compress.bench.kernel_timing import call_ms
from kernels import vptq as kv

ROWS: list[dict] = []
MS = [2, 4, 8, 16, 32, 64]


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30))


def us(fn, weights) -> float:
    try:
        return 1000 * call_ms(fn, weights)
    except Exception as e:  # a config that does not compile or launch is reported, not fatal
        print(f"    failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
        return float("inf")


def fp16_us(n, k, m):
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) / k**0.5
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    return us(lambda w: F.linear(x, w), w)


def probe_vptq():
    """Call 2: the CUDA few-token kernel (kernels/vptq_gemm_cuda.py) at its planned split and at others, next to
    fp16, vptq_linear (CUDA GEMV at M = 1, Triton GEMV at 2-4, dequantize + cuBLAS above) and the Triton kernel.
    Call 1 (session 21) swept the Triton kernel's tiles instead: BG {8,16,32} x BJ {16,32,64} x {4,8} warps."""
    from kernels import vptq_gemm_cuda as vc
    shapes = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, k in shapes:
        for main, res in ((4096, 256), (8192, 512)):
            _, meta, t = random_vptq(torch.randn(n, k, device="cuda", dtype=torch.float16), main=main, residual=res)
            wts = (t["vptq_indices"], t["vptq_codebook"], t["vptq_res_indices"], t["vptq_res_codebook"], t["vptq_scale"],
                   t["vptq_bias"])
            b, rb = meta["index_bits"], meta["res_index_bits"]
            for m in [1, 2, 4, 8, 16, 32, 64] if main == 4096 else [1, 8, 64]:
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                ref = kv.vptq_linear_ref(x, n, *wts[:2], b, *wts[2:4], rb, *wts[4:])
                base = fp16_us(n, k, m)
                lin = us(lambda w: kv.vptq_linear(x, n, w[0], w[1], b, w[2], w[3], rb, w[4], w[5]), wts)
                tri = float("nan")
                if main == 4096 and m in (8, 64) and n * k <= 4096 * 14336:
                    tri = us(lambda w: kv._gemm(x, n, w[0], w[1], b, w[2], w[3], rb, w[4], w[5],
                                                torch.empty(m, n, device="cuda", dtype=torch.float16)), wts)
                auto = vc.plan(m, n, k, sms, b, rb)
                row = {"kernel": "vptq_gemm_cuda", "n": n, "k": k, "main": main, "res": res, "m": m, "fp16_us": base,
                       "vptq_linear_us": lin, "triton_gemm_us": tri, "auto_split": auto, "splits": {}}
                for split in sorted({auto, max(1, auto // 2), auto * 2, max(1, auto * 3 // 2), 1}):
                    if split > k // 16:
                        continue
                    def call(w, split=split):
                        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
                        return vc.gemm(x, n, w[0], w[1], b, w[2], w[3], rb, w[4], w[5], out, split=split)
                    try:
                        o1, o2 = call(wts), call(wts)
                        err, same = rel(o1, ref), bool(torch.equal(o1, o2))
                    except Exception as e:
                        print(f"  {n}x{k} m={m} split {split}: failed {type(e).__name__}: {str(e)[:160]}", flush=True)
                        continue
                    t_us = us(call, wts) if err < 3e-3 and same else float("inf")
                    row["splits"][split] = {"us": t_us, "err": err, "same": same}
                ROWS.append(row)
                best = min(row["splits"].items(), key=lambda kv_: kv_[1]["us"]) if row["splits"] else (None, {"us": float("nan")})
                a = row["splits"].get(auto, {"us": float("nan"), "err": float("nan")})
                print(f"vptq {n}x{k} {main}/{res} m={m}: fp16 {base:.1f} us, vptq_linear {lin:.1f}, triton gemm {tri:.1f}, "
                      f"cuda gemm split {auto} {a['us']:.1f} (err {a['err']:.1e}), best split {best[0]} {best[1]['us']:.1f}",
                      flush=True)


def probe_w8a16():
    from compress.runtime.decode_kernels import gemm_w8, gemm_w8_fits, dequant_w8
    shapes = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]  # fused qkv, o, fused gate/up, down
    configs = list(itertools.product((16, 32, 64, 128), (4, 8), (3, 4), (1, 4)))
    gs = 128
    for n, k in shapes:
        q = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8)
        s = (torch.rand(n, k // gs, device="cuda") * 1e-3 + 1e-4).half()
        wdq = (q.float() * s.float().repeat_interleave(gs, 1))
        for m in (16, 32, 64):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            ref = (x.float() @ wdq.t()).half()
            base = fp16_us(n, k, m)
            dq = us(lambda w: F.linear(x, dequant_w8(w[0], w[1], None, torch.float16)), (q, s))
            row = {"kernel": "w8a16", "n": n, "k": k, "m": m, "fp16_us": base, "dequant_cublas_us": dq, "configs": {}}
            best = (float("inf"), None)
            for cfg in configs:
                if not gemm_w8_fits(k, gs, cfg):
                    continue
                if cfg[0] == 128 and m == 64 and cfg[1] == 4:
                    continue
                try:
                    err = rel(gemm_w8(x, q, s, gs, cfg), ref)
                except Exception as e:
                    print(f"  {n}x{k} m={m} {cfg}: failed {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                t_us = us(lambda w, cfg=cfg: gemm_w8(x, w[0], w[1], gs, cfg), (q, s)) if err < 3e-3 else float("inf")
                row["configs"][str(cfg)] = {"us": t_us, "err": err}
                best = min(best, (t_us, str(cfg)))
            row["best"] = best
            ROWS.append(row)
            top = sorted(row["configs"].items(), key=lambda kv_: kv_[1]["us"])[:4]
            print(f"w8a16 {n}x{k} m={m}: fp16 {base:.1f} us, dequant+cublas {dq:.1f} us, best "
                  + ", ".join(f"{c} {v['us']:.1f}" for c, v in top), flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for what in sys.argv[1:]:
        {"vptq": probe_vptq, "w8a16": probe_w8a16}[what]()
    if os.environ.get("PROBE_JSON"):
        with open(os.environ["PROBE_JSON"], "w") as f:
            json.dump(ROWS, f, indent=1)
