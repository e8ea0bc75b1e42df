"""Session 35: does the decode step gain when each warp-specialized W4A16 GEMV lets the next kernel launch at its start
and leaves room on every SM for it, so that the next GEMV of the chain fills its weight ring while this one still
streams?

Why: session 32 (kernels_s32/README.md) measured the 128 int4 GEMVs of a Llama-3-8B step, glue and lm_head removed, at
1.435 ms against their 0.845 ms bound: ~4.6 us a GEMV above streaming its bytes. The WS GEMV's producer already copies
weights before griddepcontrol.wait, but its CTA can only get resident once the GEMV before it has left the SM (a
persistent grid takes every SM's shared memory, and it lets its dependents launch only after its last copies).

Arms (environment of kernels/w4a16_ws.py, read at each graph capture; `cfg` = one launch config for every shape):
  shipped   as `compress bench e2e` runs
  first     COMPRESS_W4A16_WS_DEPENDENTS_FIRST=1 alone (grid as many CTAs as fit)
  cap1      COMPRESS_W4A16_WS_CTAS_PER_SM=1 alone
  first1    both (the experiment)
  first1cN  both, config N on every shape (smaller rings leave more room)
  ...pfD    with COMPRESS_W4A16_WS_PREFETCH=D: the producer asks the L2 for the row group D groups ahead (call 2)
  tree...   COMPRESS_W4A16_WS_BUILD=tree: the CUDA-core consumer sums a chunk's four words in a tree (call 3)
  small..   the knobs on the listed layer shapes only (COMPRESS_W4A16_WS_SHAPE_ONLY; call 4)
Synthetic weights, batch 1, 256 + 256 tokens, graphs on, every one-token int4 layer on the WS GEMV
(COMPRESS_PATH_FORCE=cuda_ws_gemv), paths kept across arms; arms alternate, RUNS rounds. The generated tokens of every
arm must equal the shipped arm's (the same math per row; only where the rows run changes).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s35/chain_ab.py OUT_JSON [ARM ...]
SHAPES_ARCH=llama-3-8b|qwen3-8b|llama-3-70b-layers picks the model.
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
from kernels import cuda_build, w4a16_ws  # noqa: E402

IN_LEN, OUT_LEN, RUNS = 256, 256, 3
F, C, P = "COMPRESS_W4A16_WS_DEPENDENTS_FIRST", "COMPRESS_W4A16_WS_CTAS_PER_SM", "COMPRESS_W4A16_WS_PREFETCH"
B, S = "COMPRESS_W4A16_WS_BUILD", "COMPRESS_W4A16_WS_SHAPE_ONLY"
ARMS = {
    "shipped": ({}, None),
    "first": ({F: "1"}, None),
    "cap1": ({C: "1"}, None),
    "first1": ({F: "1", C: "1"}, None),
    "first1c9": ({F: "1", C: "1"}, 9),
    "first1c7": ({F: "1", C: "1"}, 7),
    "first1c14": ({F: "1", C: "1"}, 14),
    "first2c9": ({F: "1", C: "2"}, 9),
    # call 2: the producer's L2 prefetch d row groups ahead (pfD), alone and with the capped grid
    "pf1": ({P: "1"}, None),
    "pf2": ({P: "2"}, None),
    "pf4": ({P: "4"}, None),
    "cap1pf2": ({C: "1", P: "2"}, None),
    "first1pf1": ({F: "1", C: "1", P: "1"}, None),
    "first1pf2": ({F: "1", C: "1", P: "2"}, None),
    "first1pf4": ({F: "1", C: "1", P: "4"}, None),
    "first2c9pf2": ({F: "1", C: "2", P: "2"}, 9),
    # call 3: the CUDA-core consumer's four words summed in a tree (kernels/w4a16_ws.py BUILDS)
    "tree": ({B: "tree"}, None),
    "treefirst1": ({B: "tree", F: "1", C: "1"}, None),
    # call 4: dependents first on one CTA an SM for the small layers only (S: their shapes), the large ones as shipped
    "smallfirst1": ({F: "1", C: "1", S: "6144x4096,4096x4096"}, None),
    "ofirst1": ({F: "1", C: "1", S: "4096x4096"}, None),
    "qkvfirst1": ({F: "1", C: "1", S: "6144x4096"}, None),
    "smallfirst": ({F: "1", S: "6144x4096,4096x4096"}, None),
    "downfirst1": ({F: "1", C: "1", S: "4096x14336"}, None),
}
KNOBS = (F, C, P, B, S)


def main() -> None:
    out_path = sys.argv[1]
    names = sys.argv[2:] or list(ARMS)
    arch = os.environ.get("SHAPES_ARCH", "llama-3-8b")
    model = build_synthetic(arch, "w4a16", "cuda", seed=0)
    ids = prompt_ids(model.config.vocab_size, 1, IN_LEN, 0, torch.device("cuda"))
    gen = Generator(model, 1, IN_LEN, OUT_LEN, engine="fast", cuda_graphs=True)
    gpu = torch.cuda.get_device_name()
    key = cuda_build.gpu_key(w4a16_ws.TUNED_BY_GPU, gpu) or "H200"
    table = w4a16_ws.TUNED_BY_GPU.setdefault(key, {})
    gen.warmup(ids)  # measures the paths once (kept across arms)
    shapes = sorted(table)
    shipped = dict(table)
    ref = None
    res: dict[str, list[float]] = {n: [] for n in names}
    same: dict[str, bool] = {}
    t0 = time.time()

    def dump() -> None:
        with open(out_path, "w") as f:
            json.dump({"device": gpu, "arch": arch, "in_len": IN_LEN, "out_len": OUT_LEN, "arms": names,
                       "tpot_ms": res, "tokens_equal_shipped": same,
                       "medians": {n: sorted(v)[len(v) // 2] for n, v in res.items() if v}}, f, indent=1)

    for r in range(RUNS):
        for name in names:
            env, cfg = ARMS[name]
            for k in KNOBS:
                os.environ.pop(k, None)
            os.environ.update(env)
            table.clear()
            table.update(shipped if cfg is None else {s: cfg for s in shapes})
            try:
                gen.warmup(ids)  # re-captures the graphs: the WS launches read the knobs and configs at capture
                run = gen.run(ids)
            except Exception as e:  # e.g. a config whose ring does not fit this K: the arm is dropped
                print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                res[name].append(float("nan"))
                continue
            if ref is None:
                ref = run.tokens
            same[name] = same.get(name, True) and bool(torch.equal(run.tokens, ref))
            res[name].append(round(run.tpot_s * 1e3, 4))
            print(f"round {r} {name:10s} TPOT {run.tpot_s * 1e3:.4f} ms  tokens equal: {same[name]}  "
                  f"[{time.time() - t0:.0f} s]", flush=True)
            dump()
    for k in KNOBS:
        os.environ.pop(k, None)
    for name in names:
        v = sorted(res[name])
        print(f"{name:10s} median {v[len(v) // 2]:.4f} ms  runs {res[name]}", flush=True)
    dump()


if __name__ == "__main__":
    main()
