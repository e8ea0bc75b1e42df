"""Session 17: why the kernel table (compress bench kernels --suite sparse24) times the one-token W8A16 2:4 GEMV slower
than w8a16_sweep.py on the same shapes. Times the same launch four ways, by compress.bench.kernel_timing.call_ms
(rotating weight copies): the sweep's direct launch and the table's runtime layer (kernel_suites.runtime_paths), each
on the weights alone and on the weights plus the int8 CUDA GEMV's metadata fragments (which the table's dict carries
and which set how many copies rotate).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s17/harness_ab.py
"""

from __future__ import annotations

import torch

from compress.bench import kernel_timing as kt
from compress.bench.kernel_suites import _sparse24_layer, runtime_paths
from kernels.cases import make_sparse24
from kernels.i8_gemv import pack_meta_fragments
from kernels.sparse24 import _config_w8a16, sparse24_w8a16_linear_ref, sparse24_w8a16_linear_tiled

for n, k in [(1024, 8192), (4096, 14336), (8192, 8192)]:
    p = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
    pf = dict(p, meta_frag=pack_meta_fragments(p["meta"], n, k))
    x = torch.randn(1, k, device="cuda").half()
    want = sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
    cfg = _config_w8a16(1, n, k)
    out = {}
    for name, w in (("weights", p), ("+frag", pf)):
        out[f"direct {name}"] = 1000 * kt.call_ms(
            lambda q: sparse24_w8a16_linear_tiled(x, q["values"], q["meta"], q["w_scale"], cfg), w)
        out[f"runtime {name}"] = 1000 * runtime_paths(_sparse24_layer(n, k, "compressed-tensors.w8a16"), w, x, want,
                                                      "rotate")["paths"]["kernel"]
        out[f"copies {name}"] = kt.copies_needed(kt.weight_bytes(w), kt.l2_bytes("cuda"))
    print(f"{n}x{k}: " + ", ".join(f"{a} {v:.2f}" if isinstance(v, float) else f"{a} {v}" for a, v in out.items()), flush=True)
