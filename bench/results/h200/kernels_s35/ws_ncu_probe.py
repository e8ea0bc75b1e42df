"""Session 35: what limits the warp-specialized W4A16 GEMV at one token on the H200 -- the kernels for Nsight Compute
to read (the WS GEMV serves every int4 layer of the 8B decode step; calls 1-4 here found it needs both CTAs' rings in
flight on each SM, and that a consumer with 2 more instructions a chunk is slower).

For each shape named on the command line ("N,K", default the 8B gate/up 14336,4096, the 8B fused gate_up 28672,4096
and the 8B q/o 4096,4096): the WS GEMV in the config the runtime serves on this GPU, three calls, each on its own
weights (ncu also flushes the caches before each profiled kernel by default). Without ncu it prints each call's time
from CUDA events, as a sanity check.
"""

from __future__ import annotations

import sys

import torch

from kernels import w4a16_ws
from kernels.cases import make_int4


def main() -> None:
    shapes = [tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or [(14336, 4096), (28672, 4096), (4096, 4096)]
    gpu = torch.cuda.get_device_name()
    for n, k in shapes:
        x = torch.randn(1, k, device="cuda").half()
        ps = [make_int4(n, k, 128, True, torch.float16, "cuda", seed=i) for i in range(3)]
        c = w4a16_ws.config_for(n, k, gpu)
        w4a16_ws._launch(x, ps[0]["qweight"], ps[0]["scales"], None, 128)  # build outside the profiled calls
        torch.cuda.synchronize()
        for i in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            w4a16_ws._launch(x, ps[i]["qweight"], ps[i]["scales"], None, 128)
            b.record()
            torch.cuda.synchronize()
            print(f"{n}x{k} ws {w4a16_ws.describe(c)} call {i}: {1000 * a.elapsed_time(b):.1f} us (eager, one call)",
                  flush=True)


if __name__ == "__main__":
    main()
