"""Session 18: why the kernel table times the one-token W8A16 2:4 GEMV slower than a fresh process does. For each shape,
the same M = 1 layer is timed two ways -- the table's (`kernel_suites.runtime_paths` on the runtime's Sparse24Linear,
int8 weights with the CUDA GEMV's metadata fragments, as `run_sparse24` builds them) and the sweep's (a direct
`sparse24_w8a16_linear_tiled` call on plain weights) -- fresh, then after `run_sparse24` ran that one shape (its fp16,
W8A8 and W8A16 rows at every M, the W8A16 M = 1 row printed), then after `torch.cuda.empty_cache()`.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s18/table_state.py OUT [NxK ...]
-> OUT/table_state.json
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[2:]] or [(4096, 14336), (1024, 8192)]
    from compress.bench import kernel_suites as ks
    from compress.bench.kernel_timing import checked_call_us, copy_bandwidth_gbs
    from kernels import sparse24 as sp
    from kernels.cases import LLAMA_SHAPES, make_sparse24
    from kernels.i8_gemv import pack_meta_fragments

    t0 = time.time()
    gbs = copy_bandwidth_gbs()
    res = []
    for n, k in shapes:
        name = next((nm for nm, nn, kk in LLAMA_SHAPES if (nn, kk) == (n, k)), f"{n}x{k}")
        x = torch.randn(1, k, device="cuda").half()

        def both(stage):
            q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
            want = sp.sparse24_w8a16_linear_ref(x, q["values"], q["meta"], q["w_scale"])
            plain = {key: q[key] for key in ("values", "meta", "w_scale")}
            direct = checked_call_us(lambda w: sp.sparse24_w8a16_linear(x, w["values"], w["meta"], w["w_scale"]), plain,
                                     want, tol=3e-3)["us"]
            q["meta_frag"] = pack_meta_fragments(q["meta"], n, k)
            tab = ks.runtime_paths(ks._sparse24_layer(n, k, "compressed-tensors.w8a16"), q, x, want, "rotate")
            r = {"shape": name, "stage": stage, "direct_us": direct, "table_way_us": 1000 * tab["ms"],
                 "table_way_path": tab["path"], "paths_us": {a: 1000 * b for a, b in tab["paths"].items()},
                 "allocated_gb": torch.cuda.memory_allocated() / 1e9, "reserved_gb": torch.cuda.memory_reserved() / 1e9}
            print(f"[{time.time() - t0:5.1f} s] {name} {stage}: direct {direct:.2f} us | table's way {r['table_way_us']:.2f} "
                  f"us ({tab['path']}) | reserved {r['reserved_gb']:.1f} GB", flush=True)
            res.append(r)
            del q, plain

        both("fresh")
        both("fresh again")
        ks.LLAMA_SHAPES = [(name, n, k)]
        rows = ks.run_sparse24(gbs, quick=False)
        row = next(r for r in rows if r["M"] == 1 and r["variant"] == "int8 (W8A16)")
        print(f"[{time.time() - t0:5.1f} s] {name} run_sparse24's W8A16 M=1 row: {1000 * row['kernel_ms']:.2f} us "
              f"(dense {1000 * row['dense_ms']:.2f})", flush=True)
        res.append({"shape": name, "stage": "run_sparse24 row", "table_us": 1000 * row["kernel_ms"],
                    "dense_us": 1000 * row["dense_ms"]})
        both("after run_sparse24")
        torch.cuda.empty_cache()
        both("after empty_cache")
        with open(f"{out}/table_state.json", "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
