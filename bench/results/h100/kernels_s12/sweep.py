"""Session 12, W4A16 at M = 16 / 32 / 64: the split-K tail with four partials in flight, and split counts the
session-8 sweep never tried (it only raised the split, waves 2 -> 4).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s12/sweep.py OUT
  warm   (a pool of processes) compiles every Triton candidate tile and builds the CUDA GEMV variants the defaults
         use, so that the timing process below finds them cached;
  time   per Llama-3 shape of the kernels table and M in SWEEP_MS, in one process, all by
         compress.bench.kernel_timing.call_ms(method="rotate"): torch fp16 F.linear; the Triton launcher's current
         config with the tail of before (round 1) and with the new one (round 4); the CUDA GEMV's current default;
         candidates (tile x split, round 4). Every timed call is checked first against w4a16_linear_ref (output
         poisoned with NaN first) and for the same bytes twice;
  picks  per row the fastest correct candidate where it beats the current Triton config (round 4) by > 2%, timed
         a second time (that time is what the table reports) -> OUT/picks.json ({"N,K": {"bucket": cfg}});
  table  OUT/sweep.json and a table: fp16, ours before (the faster of the Triton launcher with the old tail and
         the CUDA GEMV), ours after (the same with the new tail and the pick), ratios; medians and slower rows.
Rows go in priority order (the rows slower than fp16 first) so that SWEEP_LIMIT_S cuts the least useful ones.
Session 38 (bench/results/h200/kernels_s38/): candidates at M >= w4a16.TILE_LAUNCH_MIN_M launch as the served tiles do
there (w4a16.TILE_LAUNCH, programmatic dependent launch since session 13); before, they launched without it while the
served config had it.
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

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/s12"
LIMIT_S = float(os.environ.get("SWEEP_LIMIT_S", "1e9"))
MS = tuple(int(v) for v in os.environ.get("SWEEP_MS", "64,32,16").split(","))


def _tc(bm, bn, nb, w, st):
    return {"kind": "tc", "BM": bm, "BN": bn, "NB": nb, "num_warps": w, "num_stages": st}


# Call 2 (first sweep) found the split count matters most; call 3 adds tiles narrower than M (several M tiles read
# the same weights, the later ones from L2), narrower N tiles and deeper pipelines, and times every split count.
TILES = {16: [_tc(16, 128, 2, 8, 3), _tc(16, 64, 4, 4, 3), _tc(16, 128, 4, 8, 3), _tc(16, 256, 2, 8, 3),
              _tc(16, 256, 4, 8, 3), _tc(16, 256, 1, 8, 4), _tc(16, 128, 2, 8, 4), _tc(16, 64, 2, 4, 4)],
         32: [_tc(32, 128, 2, 8, 3), _tc(32, 64, 4, 4, 3), _tc(32, 64, 2, 4, 3), _tc(16, 64, 4, 4, 3),
              _tc(32, 256, 2, 8, 3), _tc(32, 64, 2, 4, 4), _tc(16, 128, 2, 8, 3), _tc(32, 32, 2, 2, 3),
              _tc(32, 256, 1, 8, 3), _tc(16, 256, 2, 8, 3)],
         64: [_tc(64, 128, 2, 8, 3), _tc(64, 64, 2, 4, 3), _tc(64, 128, 1, 8, 2), _tc(32, 64, 2, 4, 3),
              _tc(16, 64, 4, 4, 3), _tc(64, 32, 2, 2, 3), _tc(64, 32, 4, 4, 3), _tc(64, 64, 1, 4, 4),
              _tc(64, 64, 2, 8, 3), _tc(32, 128, 2, 8, 3), _tc(64, 256, 1, 8, 3), _tc(16, 128, 2, 8, 3),
              _tc(32, 64, 4, 4, 3), _tc(32, 64, 2, 4, 4), _tc(32, 32, 2, 2, 3), _tc(32, 256, 1, 8, 3)]}
# Call 12: M = 256 (where the launcher dequantizes and calls cuBLAS) with tensor-core tiles of 64 / 128 tokens.
TILES[256] = [_tc(64, 128, 2, 8, 3), _tc(64, 256, 1, 8, 3), _tc(128, 128, 1, 8, 3), _tc(128, 256, 1, 8, 3),
              _tc(64, 128, 1, 8, 4), _tc(128, 64, 2, 4, 3)]
# split counts tried: every one (even chunks) whose grid stays within ~2.3 waves of 132 SMs (call 12: SWEEP_MAX_GRID)
MAX_GRID = int(os.environ.get("SWEEP_MAX_GRID", "300"))
# (label, N, K) in priority order: the rows slower than fp16 (k/v, 8B q/o), then the M = 16 median's middle rows.
ORDER = [("8B k/v_proj", 1024, 4096), ("70B k/v_proj", 1024, 8192), ("8B q/o_proj", 4096, 4096),
         ("70B q/o_proj", 8192, 8192), ("8B down_proj", 4096, 14336), ("8B gate/up_proj", 14336, 4096),
         ("70B down_proj", 8192, 28672), ("70B gate/up_proj", 28672, 8192)]

# SWEEP_SHAPES="NxK,..." replaces ORDER: call 8 swept the fused layers the runtime builds (q/k/v and gate/up
# concatenated, compress.runtime.fuse) for Llama-3-8B / 70B and Qwen3-8B, and Qwen3-8B's down projection.
if os.environ.get("SWEEP_SHAPES"):
    ORDER = [(f"{nk}", int(nk.split("x")[0]), int(nk.split("x")[1])) for nk in os.environ["SWEEP_SHAPES"].split(",")]


def _launch_rule(cfg, m):
    """A candidate tile as the launcher serves tiles at m tokens: with w4a16.TILE_LAUNCH from TILE_LAUNCH_MIN_M."""
    from kernels import w4a16
    return cfg | w4a16.TILE_LAUNCH if m >= w4a16.TILE_LAUNCH_MIN_M else cfg


def _warm_one(job):
    """Compile one Triton tile (S == 1, S > 1 and one step per split: Triton specialises integers equal to 1) or
    build one CUDA variant."""
    kind, arg = job
    t = time.time()
    if kind == "cuda":
        from kernels import w4a16_cuda
        w4a16_cuda.build(torch.device("cuda"), arg)
        return f"cuda {arg} {time.time() - t:.1f} s"
    from kernels.cases import make_int4
    from kernels.w4a16 import _launch
    cfg, rnd = arg
    n, k = 1024, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=1)
    x = torch.randn(cfg["BM"], k, device="cuda").half()
    steps = (k // 128) // cfg["NB"]
    try:
        for split in (1, 2, steps):
            _launch(x, p["qweight"], p["scales"], None, 128, cfg | {"split": split, "round": rnd})
        torch.cuda.synchronize()
    except Exception as e:  # e.g. a tile past the shared memory: the timing stage reports it per row
        return f"tc {json.dumps(cfg)} round {rnd} FAILED {str(e)[:120]}"
    return f"tc {json.dumps(cfg)} round {rnd} {time.time() - t:.1f} s"


def warm(t0):
    from kernels import w4a16_cuda
    from kernels.w4a16 import _config
    jobs = {("cuda", w4a16_cuda.default_config(m, n, k)[0]) for m in MS for _, n, k in ORDER}
    cur = {json.dumps({kk: v for kk, v in _config(m, n, k).items() if kk != "waves"}, sort_keys=True)
           for m in MS for _, n, k in ORDER if _config(m, n, k)["kind"] == "tc"}  # not the dequant path (M > 64)
    cfgs = cur | {json.dumps(_launch_rule(c, m), sort_keys=True) for m in MS for c in TILES[m]}
    jobs = sorted(jobs) + [("tc", (json.loads(c), 4)) for c in sorted(cfgs)] + [("tc", (json.loads(c), 1)) for c in sorted(cur)]
    import multiprocessing as mp
    with ProcessPoolExecutor(min(12, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
        for msg in pool.map(_warm_one, jobs):
            print(f"[{time.time() - t0:6.1f} s] warm {msg}", flush=True)


def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    if os.environ.get("SWEEP_WARM", "1") == "1":
        warm(t0)
    from compress.bench import kernel_timing as kt
    from kernels import w4a16_cuda
    from kernels.cases import make_int4
    from kernels.w4a16 import _config, _launch, w4a16_linear_ref

    dev = torch.device("cuda")

    def log(msg):
        print(f"[{time.time() - t0:6.1f} s] {msg}", flush=True)

    timed = kt.checked_call_us  # checked against the reference and for the same bytes, then timed

    def good(r):
        return r["err"] < 2e-3 and r["same"]

    res = {"device": torch.cuda.get_device_name(), "desc": kt.device_description(), "copy_gbs": kt.copy_bandwidth_gbs(dev),
           "rows": []}
    log(f"device {res['desc']}; copy bandwidth {res['copy_gbs']:.0f} GB/s")
    picks = {}
    for m in MS:
        for label, n, k in ORDER:
            p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
            w = torch.randn(n, k, device="cuda").half()
            x = torch.randn(m, k, device="cuda").half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"])
            r = {"label": label, "n": n, "k": k, "m": m, "fp16_us": 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w)}
            cur = _config(m, n, k)
            tri = lambda cfg: (lambda p_: _launch(x, p_["qweight"], p_["scales"], None, 128, cfg))  # noqa: E731
            r["cur_cfg"] = cur
            r["tri_r1"] = timed(tri(cur | {"round": 1}), p, want)
            r["tri_r4"] = timed(tri(cur | {"round": 4}), p, want)
            name, waves, cluster, _ = w4a16_cuda.default_config(m, n, k)
            r["cuda"] = timed(lambda p_: w4a16_cuda._launch(x, p_["qweight"], p_["scales"], None, 128, name=name,
                                                            waves=waves, cluster=cluster), p, want)
            r["cuda"]["plan"] = f"{name} w{waves}" + (" cl" if cluster else "")
            # candidates: each tile at splits around the waves = 2 plan (1/8 .. 2x) and 1
            r["cands"] = []
            for tile in TILES[m]:
                tiles = -(-n // tile["BN"]) * -(-m // tile["BM"])
                steps = -(-(k // 128) // tile["NB"])
                splits = [sp for sp in range(1, steps + 1) if sp == 1 or tiles * sp <= MAX_GRID]
                for split in splits:
                    if time.time() - t0 > LIMIT_S:
                        break
                    per = -(-steps // split)
                    split = -(-steps // per)  # the launcher's even chunks
                    cfg = _launch_rule(tile, m) | {"split": split}
                    if any(c["cfg"] == cfg for c in r["cands"]):
                        continue
                    r["cands"].append({"cfg": cfg} | timed(tri(cfg), p, want))
            ok = [c for c in r["cands"] if good(c)]
            if ok:
                best = min(ok, key=lambda c: c["us"])
                r["best"] = best
                # the tail, before / after, on the best config: alternated three times in this process
                r["best_round"] = {str(rnd): [1000 * kt.call_ms(tri(best["cfg"] | {"round": rnd}), p) for _ in range(1)]
                                   for rnd in (1, 4)}
                for _ in range(2):
                    for rnd in (1, 4):
                        r["best_round"][str(rnd)].append(1000 * kt.call_ms(tri(best["cfg"] | {"round": rnd}), p))
                if best["us"] < 0.98 * r["tri_r4"]["us"]:
                    r["pick"] = {"cfg": best["cfg"], "us_again": 1000 * kt.call_ms(tri(best["cfg"]), p)}
                    picks.setdefault(f"{n},{k}", {})[str(16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else m)))] = best["cfg"]
            cuda_us = r["cuda"]["us"] if good(r["cuda"]) else float("inf")
            before = min(r["tri_r1"]["us"] if good(r["tri_r1"]) else float("inf"), cuda_us)
            tri_after = min(r["tri_r4"]["us"] if good(r["tri_r4"]) else float("inf"),
                            r["pick"]["us_again"] if "pick" in r else float("inf"))
            r["before_us"], r["after_us"] = before, min(tri_after, cuda_us)
            r["after_path"] = "cuda " + r["cuda"]["plan"] if cuda_us <= tri_after else (
                "triton " + json.dumps(r["pick"]["cfg"] if "pick" in r else cur))
            res["rows"].append(r)
            log(f"{label} M={m}: fp16 {r['fp16_us']:.2f} | triton r1 {r['tri_r1']['us']:.2f} r4 {r['tri_r4']['us']:.2f} "
                f"| cuda {r['cuda']['us']:.2f} | best cand {r.get('best', {}).get('us', float('nan')):.2f} "
                f"{json.dumps(r.get('best', {}).get('cfg'))} again {r.get('pick', {}).get('us_again', float('nan')):.2f} "
                f"| before {before:.2f} after {r['after_us']:.2f} ({len(r['cands'])} cands) | best round 1 / 4: "
                f"{r.get('best_round', {}).get('1')} / {r.get('best_round', {}).get('4')}")
            with open(f"{OUT}/sweep.json", "w") as f:
                json.dump(res, f, indent=1, default=str)
            with open(f"{OUT}/picks.json", "w") as f:
                json.dump(picks, f, indent=1)
            del p, w
            torch.cuda.empty_cache()
    print("\n| layer | M | fp16 us | before us | after us | before x | after x | after path |")
    print("|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        print(f"| {r['label']} | {r['m']} | {r['fp16_us']:.2f} | {r['before_us']:.2f} | {r['after_us']:.2f} | "
              f"{r['fp16_us'] / r['before_us']:.2f}x | {r['fp16_us'] / r['after_us']:.2f}x | {r['after_path']} |")
    for m in MS:
        rows = [r for r in res["rows"] if r["m"] == m]
        if len(rows) < len(ORDER):
            print(f"M={m}: {len(rows)} of {len(ORDER)} shapes timed")
        for key in ("before_us", "after_us"):
            xs = [r["fp16_us"] / r[key] for r in rows]
            slow = [f"{r['label']} {r['fp16_us'] / r[key]:.2f}x" for r in rows if r[key] > r["fp16_us"]]
            if xs:
                print(f"M={m} {key[:-3]}: median {statistics.median(xs):.2f}x; slower than fp16: {len(slow)} {slow}")


if __name__ == "__main__":
    main()
