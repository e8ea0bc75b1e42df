"""Session 33: does the warp-specialized one-token GEMV's launch config rank the same inside the decode step's CUDA
graph as in its cold single call (kernels.w4a16_ws.TUNED_BY_GPU was chosen by single calls, kernels_s30/ws_ab.py)?

Synthetic Llama-3-8B W4A16 (or SHAPES_ARCH), batch 1, 256 + 256 tokens, graphs on, every one-token int4 layer on the
WS GEMV (COMPRESS_PATH_FORCE=cuda_ws_gemv). One pass of coordinate descent over the layer shapes: for each (N, K), each
config of kernels.w4a16_ws.CONFIGS in turn (the others as they are; a config that cannot launch this shape is skipped),
graphs re-captured, TPOT of one generation; the shape keeps the fastest. Then the tuned set against the shipped table,
alternating, RUNS times each. Only the TPOT is read.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s33/ws_graph_cfg.py OUT_JSON [CONFIGS...]
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

os.environ.setdefault("COMPRESS_PATH_FORCE", "cuda_ws_gemv")

from compress.bench.e2e_measure import prompt_ids  # noqa: E402
from compress.bench.e2e_synthetic import build_synthetic  # noqa: E402
from compress.runtime.generate import Generator  # noqa: E402
from compress.runtime.paths import TABLE  # noqa: E402
from kernels import cuda_build, w4a16_ws  # noqa: E402

IN_LEN, OUT_LEN, RUNS = 256, 256, 3


def tpot(gen, ids) -> float:
    gen.warmup(ids)  # re-captures the graphs: the WS launches read their config at capture
    return gen.run(ids).tpot_s * 1e3


def main() -> None:
    out_path = sys.argv[1]
    configs = [int(c) for c in sys.argv[2:]] or list(range(len(w4a16_ws.CONFIGS)))
    arch = os.environ.get("SHAPES_ARCH", "llama-3-8b")
    model = build_synthetic(arch, "w4a16", "cuda", seed=0)
    ids = prompt_ids(model.config.vocab_size, 1, IN_LEN, 0, torch.device("cuda"))
    gen = Generator(model, 1, IN_LEN, OUT_LEN, engine="fast", cuda_graphs=True)
    gpu = torch.cuda.get_device_name()
    key = cuda_build.gpu_key(w4a16_ws.TUNED_BY_GPU, gpu) or "H200"
    table = w4a16_ws.TUNED_BY_GPU.setdefault(key, {})
    shipped = dict(table)
    base = tpot(gen, ids)
    shapes = sorted({(k[1], k[2]) for k, v in TABLE.choice.items() if v == "cuda_ws_gemv" and k[3] == 1})
    print(f"{gpu}: WS shapes {shapes}; shipped table {shipped}; base TPOT {base:.3f} ms", flush=True)
    rows = []
    t0 = time.time()

    def dump(**more):  # after every shape: a timeout loses only the shape it was on
        with open(out_path, "w") as f:
            json.dump({"device": gpu, "arch": arch, "in_len": IN_LEN, "out_len": OUT_LEN, "base_tpot_ms": base,
                       "shipped": {f"{n}x{k}": c for (n, k), c in shipped.items()}, "shapes": rows, **more}, f, indent=1)

    for n, k in shapes:
        shipped_cfg = table.get((n, k), w4a16_ws.DEFAULT_CONFIG)
        trial = {}
        for c in configs:
            table[(n, k)] = c
            try:
                trial[c] = tpot(gen, ids)
            except Exception as e:  # e.g. the ring over the SM's shared memory for this K
                trial[c] = None
                print(f"  {n}x{k} config {c}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        ok = {c: t for c, t in trial.items() if t is not None}
        best = min(ok, key=ok.get)
        table[(n, k)] = best
        rows.append({"N": n, "K": k, "shipped": shipped_cfg, "best": best,
                     "tpot_ms": {str(c): (None if t is None else round(t, 4)) for c, t in trial.items()}})
        print(f"{n}x{k}: shipped {shipped_cfg} ({w4a16_ws.describe(shipped_cfg)}) {ok.get(shipped_cfg, float('nan')):.3f}"
              f" -> best {best} ({w4a16_ws.describe(best)}) {ok[best]:.3f} ms   [{time.time() - t0:.0f} s]", flush=True)
        print("    " + " ".join(f"{c}:{t:.3f}" for c, t in sorted(ok.items())), flush=True)
        dump()
    tuned = dict(table)
    ab = {"shipped": [], "tuned": []}
    for _ in range(RUNS):
        for arm, cfg in (("shipped", shipped), ("tuned", tuned)):
            table.clear()
            table.update(cfg)
            ab[arm].append(round(tpot(gen, ids), 4))
    print(f"A/B: shipped {ab['shipped']}  tuned {ab['tuned']}", flush=True)
    dump(tuned={f"{n}x{k}": c for (n, k), c in tuned.items()}, ab=ab)


if __name__ == "__main__":
    main()
