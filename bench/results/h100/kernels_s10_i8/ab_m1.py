"""Session 10, call 5: the 2:4 int8 CUDA GEMV's two launch switches side by side at M = 1, 2 and 4 on the 8 Llama-3
shapes (rotate timing, one process): the in-kernel quantizer (qin) and the quantizer launched under programmatic
dependent launch (chain), each against the default. Usage: python3 bench/results/h100/kernels_s10_i8/ab_m1.py"""

import torch

from compress.bench.kernel_timing import graph_us, weight_copies
from kernels import i8_gemv
from kernels.cases import LLAMA_SHAPES, make_sparse24

ARMS = {"quantizer": dict(qin=False, chain=False), "quantizer+chain": dict(qin=False, chain=True),
        "qin": dict(qin=True)}
print("layer              M  " + "  ".join(f"{a:>15s}" for a in ARMS) + "   default")
for label, n, k in LLAMA_SHAPES:
    q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
    frag = i8_gemv.pack_meta_fragments(q["meta"], n, k)
    copies = weight_copies((q["values"], q["w_scale"], frag))
    for m in (1, 2, 4):
        x = torch.randn(m, k, device="cuda").half()
        us = {a: graph_us([lambda w=w, kw=kw: i8_gemv._launch(x, w[0], w[1], w[2], **kw) for w in copies])
              for a, kw in ARMS.items()}
        us["default"] = graph_us([lambda w=w: i8_gemv._launch(x, w[0], w[1], w[2]) for w in copies])
        print(f"{label:18s} {m:2d} " + "  ".join(f"{us[a]:15.2f}" for a in ARMS) + f"  {us['default']:8.2f}", flush=True)
    del q, frag, copies
