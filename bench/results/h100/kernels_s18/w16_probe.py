"""Session 18: the one-token W8A16 2:4 GEMV (`_sparse24_gemv_w16_kernel`) under named configs, with each arm's grid and
the compiled kernels' registers, to see which launch shape the time follows.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s18/w16_probe.py OUT
Env: PROBE_SHAPES="NxK,..." (default the 8 Llama-3 shapes), PROBE_ARMS='{"name": {config keys}}' merged over the
served config (`_config_w8a16(1, n, k)`); an arm may name "base": "W16_CONFIG" to start from the plain default instead.
Each arm: checked against `sparse24_w8a16_linear_ref`, timed by `kernel_timing.checked_call_us` (rotating weights) twice in
alternation, the faster kept; printed with its grid (row tiles x K splits). -> OUT/w16_probe.json
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (1024, 8192), (28672, 8192),
          (8192, 28672)]
if os.environ.get("PROBE_SHAPES"):
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["PROBE_SHAPES"].split(",")]
ARMS = json.loads(os.environ.get("PROBE_ARMS", "{}"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    import triton

    from compress.bench import kernel_timing as kt
    from compress.bench.kernel_suites import w8a16_dense
    from kernels import sparse24 as sp
    from kernels._common import config_chunks
    from kernels.cases import make_sparse24

    rows = []
    for n, k in SHAPES:
        p = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        x = torch.randn(1, k, device="cuda").half()
        want = sp.sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
        served = sp._config_w8a16(1, n, k)
        arms = {"served": served}
        for name, v in ARMS.items():
            base = dict(sp.W16_CONFIG) if v.get("base") == "W16_CONFIG" else dict(served)
            arms[name] = base | {key: val for key, val in v.items() if key != "base"}
        d = w8a16_dense(n, k, 1, "rotate")
        r = {"n": n, "k": k, "dense_us": 1000 * d["best_ms"], "dense_path": d["best_path"], "t": {}, "grid": {},
             "cfg": arms}
        for name, cfg in arms.items():
            tiles = triton.cdiv(n, cfg["BN"])
            split, _ = config_chunks(tiles, triton.cdiv(sp.meta_words(k), cfg["BW"]), cfg, x.device)
            r["grid"][name] = [tiles, split]
        for _ in range(2):
            for name, cfg in arms.items():
                got = kt.checked_call_us(
                    lambda q, c=cfg: sp.sparse24_w8a16_linear_tiled(x, q["values"], q["meta"], q["w_scale"], c), p, want,
                    tol=3e-3)
                r["t"][name] = min(r["t"].get(name, float("inf")), got["us"])
                if "error" in got:
                    r.setdefault("errors", {})[name] = got["error"]
        rows.append(r)
        print(f"[{time.time() - t0:5.1f} s] {n}x{k}: dense W8A16 {r['dense_us']:.2f} | " + " ".join(
            f"{a} {us:.2f} ({r['grid'][a][0]}x{r['grid'][a][1]}, {r['dense_us'] / us:.3f}x)" for a, us in r["t"].items()),
            flush=True)
        with open(f"{out}/w16_probe.json", "w") as f:
            json.dump(rows, f, indent=1)
        del p
    caches = sp._sparse24_gemv_w16_kernel.device_caches
    for dev, entry in caches.items():
        for key, kern in entry[0].items():
            consts = {c: v for c, v in getattr(kern.src, "constants", {}).items()} if hasattr(kern, "src") else {}
            print(f"compiled: regs {kern.n_regs} spills {kern.n_spills} {str(consts)[:300] or str(key)[:300]}")


if __name__ == "__main__":
    main()
