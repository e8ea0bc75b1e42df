"""Session 35 (call 7): does the WS GEMV gain from a persistent grid that gives every CTA the same number of row groups?
Call 6's Nsight Compute profile found the 8B gate/up's 896 row groups on 264 CTAs (4 or 3 each) leave SMs active
only 71% of a cold call. The balanced grid keeps the same rounds (the most groups a CTA takes) on the fewest CTAs:
ceil(groups / rounds), e.g. 224 for 896 groups (4 each), 256 for the fused gate_up's 1792 (7 each).

1. Single calls, the kernel tables' rotate timing (compress.bench.kernel_timing.checked_call_us), served config, the
   default grid against the balanced one, per 8B layer shape.
2. The decode step (synthetic Llama-3-8B W4A16, batch 1, 256 + 256 tokens, graphs, every int4 layer on the WS GEMV):
   the launcher wrapped to pass the balanced grid, arms alternating, 3 rounds. Same tokens required.

Script only: it wraps kernels.w4a16_ws._launch in this process; nothing in the package changes.
Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s35/grid_ab.py OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

os.environ.setdefault("COMPRESS_PATH_FORCE", "cuda_ws_gemv")

from compress.bench import kernel_timing as kt  # noqa: E402
from compress.bench.e2e_measure import prompt_ids  # noqa: E402
from compress.bench.e2e_synthetic import build_synthetic  # noqa: E402
from compress.runtime.generate import Generator  # noqa: E402
from kernels import w4a16_ws  # noqa: E402
from kernels.cases import make_int4  # noqa: E402
from kernels.w4a16 import w4a16_linear_ref  # noqa: E402

SHAPES = [("8B gate/up", 14336, 4096), ("8B fused gate_up", 28672, 4096), ("8B fused qkv", 6144, 4096),
          ("8B q/o", 4096, 4096), ("8B down", 4096, 14336)]
IN_LEN, OUT_LEN, RUNS = 256, 256, 3


def balanced_grid(n: int, config: int, full: int) -> int:
    c, r, _, _ = w4a16_ws.CONFIGS[config]
    rb = 16 if r == 16 else c * r
    groups = -(-n // rb)
    rounds = -(-groups // min(groups, full))
    return -(-groups // rounds)


def main() -> None:
    out_path = sys.argv[1]
    gpu = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    full = 2 * sms  # what the served configs get on the H200 (2 CTAs an SM: kernels_s35 call 6's profile)
    res = {"device": gpu, "single": [], "decode": {}}
    grids = {}
    for name, n, k in SHAPES:
        c = w4a16_ws.config_for(n, k, gpu)
        g = balanced_grid(n, c, full)
        grids[(n, k)] = g
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k)).half()
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
        row = {"shape": name, "N": n, "K": k, "config": c, "balanced_grid": g}
        for label, mg in (("default", 0), ("balanced", g), ("default again", 0), ("balanced again", g)):
            row[label] = kt.checked_call_us(
                lambda p: w4a16_ws._launch(x, p["qweight"], p["scales"], None, 128, config=c, max_grid=mg), p, want)["us"]
        print(f"{name:17s} c{c} grid {full} -> {g}: {row['default']:.2f} / {row['default again']:.2f} us -> "
              f"{row['balanced']:.2f} / {row['balanced again']:.2f} us", flush=True)
        res["single"].append(row)
        del p
    json.dump(res, open(out_path, "w"), indent=1)

    model = build_synthetic("llama-3-8b", "w4a16", "cuda", seed=0)
    ids = prompt_ids(model.config.vocab_size, 1, IN_LEN, 0, torch.device("cuda"))
    gen = Generator(model, 1, IN_LEN, OUT_LEN, engine="fast", cuda_graphs=True)
    plain = w4a16_ws._launch
    use = {"on": False}

    def launch(x, qweight, scales, zeros, group_size, config=None, pdl=None, max_grid=0):
        if use["on"] and max_grid == 0:
            max_grid = grids.get((qweight.shape[0], x.shape[-1]), 0)
        return plain(x, qweight, scales, zeros, group_size, config, pdl, max_grid)

    w4a16_ws._launch = launch  # the custom op looks the name up at each call (at graph capture)
    gen.warmup(ids)
    ref = None
    t0 = time.time()
    for r in range(RUNS):
        for arm in ("shipped", "balanced"):
            use["on"] = arm == "balanced"
            gen.warmup(ids)
            run = gen.run(ids)
            ref = run.tokens if ref is None else ref
            d = res["decode"].setdefault(arm, {"tpot_ms": [], "tokens_equal": True})
            d["tpot_ms"].append(round(run.tpot_s * 1e3, 4))
            d["tokens_equal"] = d["tokens_equal"] and bool(torch.equal(run.tokens, ref))
            print(f"round {r} {arm:9s} TPOT {run.tpot_s * 1e3:.4f} ms tokens equal {d['tokens_equal']} "
                  f"[{time.time() - t0:.0f} s]", flush=True)
            json.dump(res, open(out_path, "w"), indent=1)
    for arm, d in res["decode"].items():
        v = sorted(d["tpot_ms"])
        print(f"{arm:9s} median {v[len(v) // 2]:.4f} ms  runs {d['tpot_ms']}", flush=True)


if __name__ == "__main__":
    main()
