"""Session 16: one W8A8 few-token launch per shape for Nsight Compute to profile (`ncu` wraps this script): the served
config of kernels.w8a8 at M tokens (env NCU_M, default 4) on 8B down (4096 x 14336) and 70B q/o (8192 x 8192), the
two rows in the middle of the 1.8x target's median, after warm-up launches.

Usage (repository root, GPU machine): ncu --kernel-name regex:_w8a8_kernel --launch-skip 2 --launch-count 2 \\
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \\
    --section LaunchStats --section SchedulerStats python3 bench/results/h100/kernels_s16/ncu_w8a8.py
"""

import os

import torch

from kernels.cases import make_w8a8
from kernels.w8a8 import w8a8_linear

M = int(os.environ.get("NCU_M", "4"))
for n, k in ((4096, 14336), (8192, 8192)):
    wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
    x = torch.randn(M, k, device="cuda").half()
    for _ in range(2):
        w8a8_linear(x, wq, ws)
    torch.cuda.synchronize()
    print(n, k, "done", flush=True)
