"""Session 39: the W4A16 tensor-core tile with one product a step (`one_dot`, kernels/w4a16.py) against the served
tile (eight products a step, each waited for), and NB = 4 steps, at 16 / 32 / 64 tokens on Llama-3 layers.

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s39/onedot_probe.py OUT.json
Per row, in one process: torch fp16 F.linear; the served config (kernels.w4a16._config); the same tile with
one_dot; the tile at NB 4 with and without one_dot; each at the served split, half and double of it. Every timed
call is checked first against w4a16_linear_ref and for the same bytes twice (compress.bench.kernel_timing.
checked_call_us, rotate timing). Triton compiles in a process pool first (PROBE_WARM=0 skips).
"""
from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/onedot.json"
ROWS = [("8B q/o", 4096, 4096, 64), ("8B k/v", 1024, 4096, 64), ("70B k/v", 1024, 8192, 64),
        ("8B gate/up", 14336, 4096, 64), ("8B down", 4096, 14336, 64), ("8B q/o", 4096, 4096, 32),
        ("8B q/o", 4096, 4096, 16), ("8B k/v", 1024, 4096, 16), ("8B gate/up", 14336, 4096, 16),
        ("70B q/o", 8192, 8192, 16), ("8B down", 4096, 14336, 16)]
if os.environ.get("PROBE_ROWS"):  # "N,K,M;..."
    ROWS = [(r, *map(int, r.split(","))) for r in os.environ["PROBE_ROWS"].split(";")]


def _splits(cfg, n, k, m, served_split):
    steps = -(-(k // 128) // cfg["NB"])
    out = []
    for sp in (served_split, max(1, served_split // 2), served_split * 2):
        sp = min(sp, steps)
        per = -(-steps // sp)
        sp = -(-steps // per)
        if sp not in out:
            out.append(sp)
    return out


def candidates(n, k, m):
    from kernels.w4a16 import _config, _split
    served = _config(m, n, k)
    tiles = -(-n // served["BN"]) * -(-m // served["BM"])
    split, _ = _split(served, tiles, -(-(k // 128) // served["NB"]), torch.device("cuda"))
    base = {kk: v for kk, v in served.items() if kk not in ("fill", "waves")}
    out = [("served", served)]
    for nb, stages in ((served["NB"], served["num_stages"]), (4, 2)):
        for one in (False, True):
            if nb == served["NB"] and not one and stages == served["num_stages"]:
                sps = [s for s in _splits(base, n, k, m, split) if s != split]  # the served split is "served"
            else:
                sps = _splits(base | {"NB": nb}, n, k, m, split)
            for sp in sps:
                cfg = base | {"NB": nb, "num_stages": stages, "split": sp} | ({"one_dot": True} if one else {})
                out.append((f"nb{nb}{' one' if one else ''} s{stages} split {sp}", cfg))
    return served, split, out


def _warm(job):
    n, k, m, cfg = job
    from kernels.cases import make_int4
    from kernels.w4a16 import _launch
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=1)
    x = torch.randn(m, k, device="cuda").half()
    t = time.time()
    try:
        _launch(x, p["qweight"], p["scales"], None, 128, cfg)
        torch.cuda.synchronize()
        return f"ok {time.time() - t:.1f} s {json.dumps(cfg)}"
    except Exception as e:
        return f"FAILED {json.dumps(cfg)} {str(e)[:160]}"


def main():
    t0 = time.time()
    from compress.bench import kernel_timing as kt
    from kernels.cases import make_int4
    from kernels.w4a16 import _launch, w4a16_linear_ref
    if os.environ.get("PROBE_WARM", "1") == "1":
        jobs = {json.dumps([n, k, m, c], sort_keys=True) for _, n, k, m in ROWS for _, c in candidates(n, k, m)[2]}
        import multiprocessing as mp
        with ProcessPoolExecutor(12, mp_context=mp.get_context("spawn")) as pool:
            for msg in pool.map(_warm, [json.loads(j) for j in sorted(jobs)]):
                if "FAILED" in msg:
                    print(f"[{time.time() - t0:6.1f} s] warm {msg}", flush=True)
        print(f"[{time.time() - t0:6.1f} s] warm done ({len(jobs)} configs)", flush=True)
    res = {"device": torch.cuda.get_device_name(), "desc": kt.device_description(), "rows": []}
    for label, n, k, m in ROWS:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w = torch.randn(n, k, device="cuda").half()
        x = torch.randn(m, k, device="cuda").half()
        want = w4a16_linear_ref(x, p["qweight"], p["scales"])
        served, split, cands = candidates(n, k, m)
        row = {"label": label, "n": n, "k": k, "m": m, "served_cfg": served, "served_split": split,
               "fp16_us": 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w), "cands": []}
        for name, cfg in cands:
            r = kt.checked_call_us(lambda p_, c=cfg: _launch(x, p_["qweight"], p_["scales"], None, 128, c), p, want)
            row["cands"].append({"name": name, "cfg": cfg} | r)
        row["fp16_us_again"] = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w)
        res["rows"].append(row)
        sv = row["cands"][0]["us"]
        best = min(row["cands"], key=lambda c: c["us"])
        print(f"[{time.time() - t0:6.1f} s] {label} {n}x{k} M={m}: fp16 {row['fp16_us']:.2f}/{row['fp16_us_again']:.2f} "
              f"served {sv:.2f} (split {split}) best {best['us']:.2f} [{best['name']}] | "
              + " ".join(f"{c['name']}={c['us']:.2f}" for c in row["cands"][1:]), flush=True)
        with open(OUT, "w") as f:
            json.dump(res, f, indent=1, default=str)
        del p, w


if __name__ == "__main__":
    main()
