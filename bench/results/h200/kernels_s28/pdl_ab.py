"""Session 28: does programmatic dependent launch change what the kernel table measures for the W4A16 GEMV at one
token? Each layer shape's served config (`default_config` with this GPU's name), timed by the table's rotate method
(compress.bench.kernel_timing.call_ms: one CUDA graph of back-to-back calls on rotating weight copies) with plain
launches (pdl 0), programmatic dependent launch (1) and PDL with the weights read before the wait (2, the default),
in one process, twice in a row (0, 1, 2, 0, 1, 2), checked against the reference first.
Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s28/pdl_ab.py
"""

import torch

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda
from kernels.cases import LLAMA_SHAPES, make_int4, rel_err
from kernels.w4a16 import w4a16_linear_ref

gpu = w4a16_cuda.gpu_name(torch.device("cuda"))
for label, n, k in LLAMA_SHAPES:
    name, waves, cluster, bal = w4a16_cuda.default_config(1, n, k, gpu)
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
    x = torch.randn(1, k, device="cuda").half()
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
    row = f"{label:16s} {name}/{waves}/{int(cluster)}/{int(bal)}"
    for pdl in (0, 1, 2, 0, 1, 2):
        def call(q, pdl=pdl):
            return w4a16_cuda._launch(x, q["qweight"], q["scales"], None, 128, name=name, waves=waves, cluster=cluster,
                                      balanced=bal, pdl=pdl)
        assert rel_err(call(p), want) < 2e-3
        row += f" | pdl{pdl} {1000 * kt.call_ms(call, p):6.2f}"
    print(row + " us", flush=True)
