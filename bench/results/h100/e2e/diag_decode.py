"""Decode-step diagnostics on the GPU (how the session-2 numbers in README.md were taken):
1. dense M=1 GEMV bandwidth per Llama-3-8B / Qwen3-8B shape: cuBLAS (F.linear) vs the runtime's Triton
   GEMV configs, each as a CUDA graph of 32 calls over 32 distinct weight copies (no L2 reuse between
   calls, as in a decode step), GB/s = weight bytes / time;
2. the decode attention kernels vs the plain-torch attention (correctness, time per layer);
Usage: python bench/results/h100/e2e/diag_decode.py OUTDIR
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from compress.bench.e2e_measure import copy_bandwidth_gbs
from compress.runtime.decode_kernels import GEMV_CONFIGS, DecodeAttention, attention_reference, gemv
from compress.runtime.fastpath import decode_attention

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
dev = torch.device("cuda")
res = {"device": torch.cuda.get_device_name(), "copy_bw_gbs": copy_bandwidth_gbs(dev)}
print(f"copy bandwidth {res['copy_bw_gbs']:.0f} GB/s", flush=True)


def graph_time(fns, reps=10) -> float:
    """ms per replay of a graph that calls every fn once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


SHAPES = {"llama8b.qkv": (6144, 4096), "llama8b.o": (4096, 4096), "llama8b.gate_up": (28672, 4096),
          "llama8b.down": (4096, 14336), "llama8b.lm_head": (128256, 4096), "qwen3.gate_up": (24576, 4096),
          "qwen3.down": (4096, 12288), "qwen3.lm_head": (151936, 4096)}
gemv_rows = []
for name, (n, k) in SHAPES.items():
    copies = 4 if n > 100000 else 32
    ws = [torch.randn(n, k, device=dev, dtype=torch.float16) * 0.02 for _ in range(copies)]
    x = torch.randn(1, k, device=dev, dtype=torch.float16)
    nbytes = n * k * 2 * copies
    row = {"shape": name, "N": n, "K": k}
    ref = F.linear(x, ws[0]).float()
    row["cublas"] = nbytes / graph_time([lambda w=w: F.linear(x, w) for w in ws]) / 1e6
    for cfg in GEMV_CONFIGS:
        err = ((gemv(x, ws[0], cfg).float() - ref).norm() / ref.norm()).item()
        assert err < 2e-3, (name, cfg, err)
        row["gemv_%dx%d_w%d" % cfg] = nbytes / graph_time([lambda w=w: gemv(x, w, cfg) for w in ws]) / 1e6
    gemv_rows.append(row)
    print(" ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    del ws
    torch.cuda.empty_cache()
res["gemv_gbs"] = gemv_rows

# Decode attention: 32 layers' caches (distinct memory), Llama-3-8B heads.
attn_rows = []
for b, length, pos in ((1, 768, 600), (1, 16416, 16400), (8, 384, 300), (64, 384, 300)):
    h, hkv, d, layers = 32, 8, 128, 32 if b * length <= 16416 else 8
    kcs = [torch.randn(b, hkv, length, d, device=dev, dtype=torch.float16) for _ in range(layers)]
    vcs = [torch.randn(b, hkv, length, d, device=dev, dtype=torch.float16) for _ in range(layers)]
    qkv = torch.randn(b, (h + 2 * hkv) * d, device=dev, dtype=torch.float16)
    q, k, v = qkv.split([h * d, hkv * d, hkv * d], dim=1)
    ang = torch.rand(d // 2, device=dev) * 3
    cos, sin = torch.cat([ang, ang]).cos().half(), torch.cat([ang, ang]).sin().half()
    p = torch.tensor(pos, device=dev)
    att = DecodeAttention(b, h, hkv, d, length, dev)
    kc2, vc2 = kcs[0].clone(), vcs[0].clone()
    o = att(q, k, v, cos, sin, kcs[0], vcs[0], p, d ** -0.5)
    r = attention_reference(q, k, v, cos, sin, kc2, vc2, pos, d ** -0.5)
    err = ((o.float() - r.float()).norm() / r.float().norm()).item()
    t_kernel = graph_time([lambda i=i: att(q, k, v, cos, sin, kcs[i], vcs[i], p, d ** -0.5) for i in range(layers)]) / layers
    qh = q.reshape(b, 1, h, d)

    def torch_attn(i):
        kcs[i].index_copy_(2, p.reshape(1), k.reshape(b, 1, hkv, d).transpose(1, 2))
        vcs[i].index_copy_(2, p.reshape(1), v.reshape(b, 1, hkv, d).transpose(1, 2))
        return decode_attention(qh, kcs[i], vcs[i], p, d ** -0.5)

    t_torch = graph_time([lambda i=i: torch_attn(i) for i in range(layers)]) / layers
    row = {"batch": b, "cache_len": length, "pos": pos, "splits": att.splits, "chunk": att.chunk, "rel_err": err,
           "kernel_us": t_kernel * 1e3, "torch_eager_ops_us": t_torch * 1e3}
    attn_rows.append(row)
    print(row, flush=True)
    del kcs, vcs
    torch.cuda.empty_cache()
res["attention"] = attn_rows
(out / "diag_decode.json").write_text(json.dumps(res, indent=1))
