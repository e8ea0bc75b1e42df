"""Session 13: the W4A16 tensor-core tiles under programmatic dependent launch (config keys "pdl" / "chain").

Until now the Triton tiles that serve 2..256 tokens were plain launches: each call waited for the previous kernel to
finish before its first weight request. With "pdl" the call may start while the kernel before it drains, sends the
first `pdl` bytes of each of its weight rows to L2, and waits (griddepcontrol.wait) before reading x or the split-K
buffers; "chain" lets the kernel after it do the same (1: at the program's start, "late": after its K loop).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s13/pdl_sweep.py OUT
  warm   a pool of processes compiles every (served tile x variant), so the timing process finds them cached;
  time   per Llama-3 shape of the kernels table and M in PDL_MS, one process, compress.bench.kernel_timing.call_ms
         (rotate: >= 120 calls back to back in one CUDA graph, so each call follows the previous call of the same
         kernel, as a model's layers follow each other): torch fp16 F.linear, the CUDA GEMV's default, the served
         Triton config as it is and with each variant. Every timed call is checked against w4a16_linear_ref first
         (output poisoned with NaN) and for the same bytes twice.
  -> OUT/pdl_sweep.json, and a table per variant: median speedup over fp16 per M, rows slower than fp16.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/s13"
LIMIT_S = float(os.environ.get("PDL_LIMIT_S", "1e9"))
MS = tuple(int(v) for v in os.environ.get("PDL_MS", "16,32,64").split(","))
VARIANTS = {"plain": {}, "wait": {"pdl": 0}, "wait+chain": {"pdl": 0, "chain": 1},
            "pf2k+chain": {"pdl": 2048, "chain": 1}, "pf2k+late": {"pdl": 2048, "chain": "late"},
            "pf2k": {"pdl": 2048}, "pf8k+chain": {"pdl": 8192, "chain": 1}}
SHAPES = [("8B q/o_proj", 4096, 4096), ("8B k/v_proj", 1024, 4096), ("8B gate/up_proj", 14336, 4096),
          ("8B down_proj", 4096, 14336), ("70B q/o_proj", 8192, 8192), ("70B k/v_proj", 1024, 8192),
          ("70B gate/up_proj", 28672, 8192), ("70B down_proj", 8192, 28672)]
if os.environ.get("PDL_SHAPES"):  # "NxK,..." (e.g. the fused layers the runtime builds)
    SHAPES = [(nk, int(nk.split("x")[0]), int(nk.split("x")[1])) for nk in os.environ["PDL_SHAPES"].split(",")]


def _served(m, n, k):
    from kernels.w4a16 import _config
    return _config(m, n, k)


def _warm_one(job):
    """Compile one config on a small layer (Triton specialises integers only on == 1 and divisibility by 16): split 1,
    2 and one step per split, so the timing process finds every specialisation it launches cached."""
    cfg, m = job
    t = time.time()
    from kernels.cases import make_int4
    from kernels.w4a16 import _launch
    n, k = 1024, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=1)
    x = torch.randn(m, k, device="cuda").half()
    try:
        for split in (1, 2, (k // 128) // cfg["NB"]):
            _launch(x, p["qweight"], p["scales"], None, 128, cfg | {"split": split})
        torch.cuda.synchronize()
    except Exception as e:
        return f"{json.dumps(cfg)} FAILED {str(e)[:160]}"
    return f"{json.dumps(cfg)} M={m} {time.time() - t:.1f} s"


def warm(t0):
    import multiprocessing as mp
    from kernels import w4a16_cuda
    jobs = {}
    for m in MS:
        for _, n, k in SHAPES:
            base = _served(m, n, k)
            if base["kind"] == "tc":
                for v in VARIANTS.values():
                    cfg = {kk: val for kk, val in (base | v).items() if kk not in ("fill", "waves")}
                    jobs.setdefault(json.dumps(cfg, sort_keys=True), (cfg, m))  # M only matters as == 1 or not
    jobs = list(jobs.values())
    with ProcessPoolExecutor(min(14, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
        for msg in pool.map(_warm_one, jobs):
            print(f"[{time.time() - t0:6.1f} s] warm {msg}", flush=True)
    names = {w4a16_cuda.default_config(m, n, k)[0] for m in MS for _, n, k in SHAPES}
    w4a16_cuda.prebuild(torch.device("cuda"), sorted(names))


def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    if os.environ.get("PDL_WARM", "1") == "1":
        warm(t0)
    from compress.bench import kernel_timing as kt
    from kernels import w4a16_cuda
    from kernels.cases import make_int4
    from kernels.w4a16 import _launch, w4a16_linear_ref

    dev = torch.device("cuda")

    def log(msg):
        print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True)

    timed = kt.checked_call_us

    res = {"device": torch.cuda.get_device_name(), "desc": kt.device_description(), "copy_gbs": kt.copy_bandwidth_gbs(dev),
           "variants": VARIANTS, "rows": []}
    log(f"device {res['desc']}; copy bandwidth {res['copy_gbs']:.0f} GB/s")
    for m in MS:
        for label, n, k in SHAPES:
            if time.time() - t0 > LIMIT_S:
                log("time limit: rows left out")
                break
            p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
            w = torch.randn(n, k, device="cuda").half()
            x = torch.randn(m, k, device="cuda").half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"])
            base = _served(m, n, k)
            r = {"label": label, "n": n, "k": k, "m": m, "cfg": base, "t": {}}
            r["fp16_us"] = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w)
            name, waves, cluster, _ = w4a16_cuda.default_config(m, n, k)
            r["t"]["cuda"] = timed(lambda p_: w4a16_cuda._launch(x, p_["qweight"], p_["scales"], None, 128, name=name,
                                                                 waves=waves, cluster=cluster), p, want)
            if base["kind"] == "tc":
                # two passes over the variants, alternating, so that drift does not favour the first
                for rep in range(2):
                    for key, v in VARIANTS.items():
                        got = timed(lambda p_, c=base | v: _launch(x, p_["qweight"], p_["scales"], None, 128, c), p, want)
                        prev = r["t"].get(key)
                        r["t"][key] = got if prev is None else (got | {"us": min(prev["us"], got["us"]),
                                                                       "us_runs": [prev["us"], got["us"]]})
            res["rows"].append(r)
            ts = " ".join(f"{key} {t['us']:.2f}" for key, t in r["t"].items())
            log(f"{label} M={m} fp16 {r['fp16_us']:.2f} | {ts}")
            with open(f"{OUT}/pdl_sweep.json", "w") as f:
                json.dump(res, f, indent=1, default=str)
            del p, w
            torch.cuda.empty_cache()
    # served = the faster of the CUDA GEMV and the Triton tile (the runtime's path table picks the faster one)
    keys = ["plain"] + [v for v in VARIANTS if v != "plain"]
    print("\n| variant | " + " | ".join(f"M={m} median x / slower rows" for m in MS) + " |")
    print("|---|" + "---|" * len(MS))
    for key in keys:
        cells = []
        for m in MS:
            rows = [r for r in res["rows"] if r["m"] == m]
            xs, slow = [], []
            for r in rows:
                us = min(r["t"]["cuda"]["us"], r["t"].get(key, r["t"].get("plain", {"us": float("inf")}))["us"])
                xs.append(r["fp16_us"] / us)
                if us > r["fp16_us"]:
                    slow.append(f"{r['label']} {r['fp16_us'] / us:.2f}x")
            cells.append(f"{statistics.median(xs):.2f}x / {len(slow)} {slow}" if xs else "-")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
