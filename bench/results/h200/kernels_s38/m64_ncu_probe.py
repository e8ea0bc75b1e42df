"""Session 38: what limits the W4A16 Triton tensor-core tile at 64 tokens on the H200, the kernels for Nsight Compute
to read. Call 1's sweep (kernels_s12/sweep.py, every tile x split) found the served tiles already the fastest on the
three rows slower than fp16 (8B q/o 13.8 us against fp16 12.0; 70B k/v 10.7 against 9.4; 8B k/v 7.8 against 7.4).

Arms (64 tokens, group 128, symmetric, fp16), each three calls on their own weights after one warm-up call (ncu
flushes the caches before each profiled kernel by default): the Triton launcher as served (kernels/w4a16.py `_config`)
on 8B q/o (4096 x 4096) and 70B k/v (1024 x 8192), and torch fp16 F.linear (cuBLAS) on 8B q/o. Without ncu it prints
each call's time from CUDA events. Arguments: arm names to run (default all).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from kernels.cases import make_int4
from kernels.w4a16 import _config, w4a16_linear

M = 64


def main() -> None:
    arms = []
    for label, n, k in (("tc 8B q/o", 4096, 4096), ("tc 70B k/v", 1024, 8192)):
        ps = [make_int4(n, k, 128, True, torch.float16, "cuda", seed=i) for i in range(4)]
        print(label, "config", _config(M, n, k), flush=True)
        arms.append((label, k, ps, lambda x, p: w4a16_linear(x, p["qweight"], p["scales"], None, 128)))
    ws = [torch.randn(4096, 4096, device="cuda").half() for _ in range(4)]
    arms.append(("fp16 8B q/o", 4096, ws, lambda x, w: F.linear(x, w)))
    for name, k, ops, fn in arms:
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        x = torch.randn(M, k, device="cuda").half()
        for i in range(4):  # call 0 warms up (and compiles)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x, ops[i])
            b.record()
            torch.cuda.synchronize()
            print(f"{name} call {i}: {1000 * a.elapsed_time(b):.1f} us (eager, one call)", flush=True)


if __name__ == "__main__":
    main()
