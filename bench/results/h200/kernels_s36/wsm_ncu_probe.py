"""Session 36: what limits the warp-specialized W4A16 GEMM at 8-16 tokens on the H200 -- the kernels for Nsight Compute
to read. Call 1 found it at 24.9 us on the 8B gate/up at 16 tokens (x for the whole K, two ring stages) and 25.9 with
K in two chunks through a cluster (four stages), against 17.5 at 8 tokens, 11.1 for the one-token WS GEMV and 18.1
for the served tensor-core GEMV at 16.

Arms on the 8B gate/up (14336 x 4096, group 128, symmetric, fp16), each three calls on their own weights after one
warm-up call (ncu also flushes the caches before each profiled kernel by default): the one-token WS GEMV as served;
the WS GEMM at 8 tokens (config 2) and at 16 (config 10, no split; config 0, two chunks through a cluster); the served
tensor-core GEMV at 16. Without ncu it prints each call's time from CUDA events, as a sanity check. Arguments: the arm
names to run (default all), e.g. "wsm c2 M=8".
"""

from __future__ import annotations

import sys

import torch

from kernels import w4a16_cuda, w4a16_ws, w4a16_ws_gemm as wsm
from kernels.cases import make_int4

N, K = 14336, 4096


def main() -> None:
    ps = [make_int4(N, K, 128, True, torch.float16, "cuda", seed=i) for i in range(4)]
    arms = [("ws gemv M=1", 1, lambda x, p: w4a16_ws._launch(x, p["qweight"], p["scales"], None, 128)),
            ("wsm c2 M=8", 8, lambda x, p: wsm._launch(x, p["qweight"], p["scales"], None, 128, 2)),
            ("wsm c10 M=16", 16, lambda x, p: wsm._launch(x, p["qweight"], p["scales"], None, 128, 10)),
            ("wsm c0 cluster M=16", 16, lambda x, p: wsm._launch(x, p["qweight"], p["scales"], None, 128, 0,
                                                                 cluster=True)),
            ("tc gemv M=16", 16, lambda x, p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], None, 128))]
    for name, m, fn in arms:
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        x = torch.randn(m, K, device="cuda").half()
        for i in range(4):  # call 0 warms up (and builds)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x, ps[i])
            b.record()
            torch.cuda.synchronize()
            print(f"{name} call {i}: {1000 * a.elapsed_time(b):.1f} us (eager, one call)", flush=True)


if __name__ == "__main__":
    main()
