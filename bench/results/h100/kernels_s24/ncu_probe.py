"""Session 24: one-token 2:4 GEMVs under Nsight Compute, one layer shape (default 70B gate/up, 28672 x 8192): the
W8A16 2:4 GEMV on the sparse tensor cores (kernels/sp24_w16_gemv.py) at two split plans, the Triton W8A16 2:4 GEMV
(kernels/sparse24.py), and the Triton W8A8 2:4 GEMV, which streams the same value and metadata bytes at ~2.8 TB/s
(session 18). Each is called twice between cudaProfilerStart / Stop, after untimed warm-up calls.

Usage (repository root, GPU machine): ncu --clock-control none --profile-from-start off [sections]
    python3 bench/results/h100/kernels_s24/ncu_probe.py [NxK]
"""

from __future__ import annotations

import sys

import torch


def main():
    n, k = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "28672x8192").split("x"))
    from kernels import sp24_w16_gemv as spw
    from kernels import sparse24 as sp
    from kernels.cases import make_sparse24

    q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
    frag = spw.pack_meta_fragments(q["meta"], n, k)
    x = torch.randn(1, k, device="cuda").half()
    calls = {
        "sp w8d2 waves1": lambda: spw.launch(x, q["values"], frag, q["w_scale"], name="w8d2", waves=1.0),
        "sp w8d2 waves2": lambda: spw.launch(x, q["values"], frag, q["w_scale"], name="w8d2", waves=2.0),
        "triton w8a16 2:4": lambda: sp.sparse24_w8a16_linear(x, q["values"], q["meta"], q["w_scale"]),
        "triton w8a8 2:4": lambda: sp.sparse24_w8a8_linear(x, q["values"], q["meta"], q["w_scale"]),
    }
    for fn in calls.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, fn in calls.items():
        torch.cuda.nvtx.range_push(name)
        for _ in range(2):
            fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("done", list(calls))


if __name__ == "__main__":
    main()
