"""Session 28 diagnostic: what in the W4A16 GEMV's frame cancels a deeper weight ring. Read alone in the GEMV's CTA
shape, a third ring slot takes the 8B gate/up bytes from 11.97 to 9.22 us (read_probe.cu, call 7); the GEMV's own
three-slot build is slower than its two-slot one. This times w16b2s2 and w16b2s3 (16 warps, one warp a tile, the
served build of the gate/up layers) as served and with parts of the kernel left out (-DW4_DIAG, kernels/w4a16_cuda.py
DIAG; outputs wrong, so timed unchecked): d1 no math, d3 no math and no scale staging, d7 no math, no scale staging and
no activation staging, d9 no math and no reads of the staged scales and activations in the main loop, d15 all of
it left out (only the weight ring and its shared-memory reads remain) -- names from the command line ("-" = as served,
default "" d1 d3 d7) -- at waves 0.5 (the probe's CTA count: no K split) and 1.0 (the served plan), by the kernel
table's rotate timing, one process, each twice.
Usage (repository root, GPU machine, at 7cdf5fe, which has the DIAG builds; later commits took them out):
  python3 bench/results/h200/kernels_s28/diag.py [SUFFIX ...]    # e.g. - d1 d9 d15
"""

import sys

import torch

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda
from kernels.cases import make_int4

names = [f"{b}{d.strip('-')}" for b in ("w16b2s2", "w16b2s3") for d in sys.argv[1:] or ("", "d1", "d3", "d7")]
w4a16_cuda.prebuild(torch.device("cuda"), names)
for label, n, k in [("8B gate/up", 14336, 4096), ("8B down", 4096, 14336), ("70B gate/up", 28672, 8192)]:
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
    x = torch.randn(1, k, device="cuda").half()
    for waves in (0.5, 1.0):
        row = f"{label:12s} waves {waves}"
        for name in names:
            def call(q, name=name):
                return w4a16_cuda._launch(x, q["qweight"], q["scales"], None, 128, name=name, waves=waves, cluster=False)
            us = [1000 * kt.call_ms(call, p) for _ in range(2)]
            row += f" | {name} {us[0]:6.2f}/{us[1]:6.2f}"
        print(row + " us", flush=True)
