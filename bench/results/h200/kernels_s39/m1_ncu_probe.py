"""Session 39: why the one-token W4A16 GEMVs read the 8B layers at 64-65% of the copy bandwidth when the 70B ones
reach 77-80% (the W4A16 table, call 7): the kernels for Nsight Compute to read. The M = 1 median (2.94x, target 3.0x)
waits on the 8B down row (2.84x).

Arms (one token, group 128, symmetric, fp16), each four calls on their own weights (call 0 warms up; ncu profiles the
next): the tensor-core GEMV as served on 8B down (kernels/w4a16_cuda.py, its H200 one-token config), the
warp-specialized GEMV (kernels/w4a16_ws.py, the measured config) on 8B down, 8B gate/up and 70B gate/up. Without ncu
it prints each call's time from CUDA events. Arguments: arm names to run (default all).
"""

from __future__ import annotations

import sys

import torch

from kernels import w4a16_cuda, w4a16_ws
from kernels.cases import make_int4

ARMS = [("cuda 8B down", "cuda", 4096, 14336), ("ws 8B down", "ws", 4096, 14336), ("ws 8B gate/up", "ws", 14336, 4096),
        ("ws 70B gate/up", "ws", 28672, 8192)]


def main() -> None:
    for name, kind, n, k in ARMS:
        if sys.argv[1:] and name not in sys.argv[1:]:
            continue
        ps = [make_int4(n, k, 128, True, torch.float16, "cuda", seed=i) for i in range(4)]
        x = torch.randn(1, k, device="cuda").half()
        if kind == "cuda":
            fn = lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], None, 128)  # noqa: E731
            print(name, "config", w4a16_cuda.default_config(1, n, k, w4a16_cuda.gpu_name(x.device)), flush=True)
        else:
            fn = lambda p: w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"], None, 128)  # noqa: E731
            print(name, "config", w4a16_ws.config_for(n, k, w4a16_cuda.gpu_name(x.device)), flush=True)
        for i in range(4):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(ps[i])
            b.record()
            torch.cuda.synchronize()
            print(f"{name} call {i}: {1000 * a.elapsed_time(b):.1f} us (eager, one call)", flush=True)


if __name__ == "__main__":
    main()
