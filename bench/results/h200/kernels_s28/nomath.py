"""Session 28 diagnostic: where the W4A16 GEMV's time goes at one token on this GPU. For each layer shape, by the kernel
table's rotate timing (compress.bench.kernel_timing.call_ms), in one process:
  served  the config the runtime serves (`default_config` with this GPU's name)
  nomath  the same build and launch with the main loop's dequantization and mmas left out (-DW4_NOMATH; kernels/
          w4a16_cuda.py NOMATH): the ring, the staging, the shared-memory reads and the epilogue remain (its output is
          wrong, so it is timed unchecked)
  read    bench/results/h200/kernels_s28/read_probe.cu's best plain read of the same bytes is in probe.log
Usage (repository root, GPU machine, at commit d128002, which has the NOMATH builds; later commits took them out):
  python3 bench/results/h200/kernels_s28/nomath.py
"""

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda
from kernels.cases import LLAMA_SHAPES, make_int4

gpu = w4a16_cuda.gpu_name(torch.device("cuda"))
shapes = list(LLAMA_SHAPES) + [("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096)]
names = {w4a16_cuda.default_config(1, n, k, gpu)[0] for _, n, k in shapes}
w4a16_cuda.prebuild(torch.device("cuda"), sorted(names | {n + "nm" for n in names if n + "nm" in w4a16_cuda.VARIANTS}))
for label, n, k in shapes:
    name, waves, cluster, bal = w4a16_cuda.default_config(1, n, k, gpu)
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
    x = torch.randn(1, k, device="cuda").half()
    fp16 = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), torch.randn(n, k, device="cuda").half())
    row = f"{label:18s} {name}/{waves}/{int(cluster)}/{int(bal)}  fp16 {fp16:7.2f} us"
    for arm in (name, name + "nm"):
        if arm not in w4a16_cuda.VARIANTS:
            continue
        us = 1000 * kt.call_ms(lambda q: w4a16_cuda._launch(x, q["qweight"], q["scales"], None, 128, name=arm, waves=waves,
                                                             cluster=cluster, balanced=bal), p)
        mb = (p["qweight"].numel() * 4 + p["scales"].numel() * 2) / 1e6
        row += f" | {arm:14s} {us:7.2f} us ({1000 * mb / us:6.0f} GB/s)"
    print(row, flush=True)
