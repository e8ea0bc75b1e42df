"""Session 27: what limits the W4A16 CUDA GEMV at one token on the H200 -- the kernels for Nsight Compute to read.

Runs, for each shape named on the command line ("N,K", default the 8B gate/up 14336,4096 and the 70B gate/up
28672,8192): torch fp16 F.linear (cuBLAS) three times, then our GEMV in the config the runtime serves three times,
each on its own weights (so a replay does not find them in L2; ncu also flushes the caches before each profiled
kernel by default). Under ncu, profile the last of each three, e.g.
  ncu --clock-control none -k regex:"w4a16|gemv|gemm" --launch-skip 2 --launch-count 1 ... (see run.sh's ncu stage)
Without ncu it prints each kernel's time from CUDA events, for a sanity check.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from kernels import w4a16_cuda
from kernels.cases import make_int4


def main() -> None:
    shapes = [tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or [(14336, 4096), (28672, 8192)]
    for n, k in shapes:
        x = torch.randn(1, k, device="cuda").half()
        ws = [torch.randn(n, k, device="cuda").half() for _ in range(3)]
        ps = [make_int4(n, k, 128, True, torch.float16, "cuda", seed=i) for i in range(3)]
        name, waves, cluster, bal = w4a16_cuda.default_config(1, n, k)
        w4a16_cuda._launch(x, ps[0]["qweight"], ps[0]["scales"], None, 128)  # build and plan outside the profiled calls
        torch.cuda.synchronize()
        for label, fn in (("fp16 F.linear", lambda i: F.linear(x, ws[i])),
                          (f"w4a16 {name}/{waves}/{int(cluster)}/{int(bal)}",
                           lambda i: w4a16_cuda._launch(x, ps[i]["qweight"], ps[i]["scales"], None, 128))):
            for i in range(3):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); fn(i); b.record(); torch.cuda.synchronize()
                print(f"{n}x{k} {label} call {i}: {1000 * a.elapsed_time(b):.1f} us (eager, one call)", flush=True)


if __name__ == "__main__":
    main()
