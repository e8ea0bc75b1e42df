"""Session 8 probe of the cluster split-K VPTQ GEMV (kernels/vptq_cluster.py) on the device.

    python bench/results/h100/kernels_s8_vptq/probe.py --out DIR [--budget-s 150] [--rotate-top 3]

For seed-000 shapes (in 1024/4096/16384 x every out, codebooks 4096/256 and 8192/512): torch fp16, the
split-K kernel (kernels/vptq_cuda.py) and every candidate launch of the cluster kernel, each checked
against the split-K kernel's output (itself tested against the reference) and timed by the flush method;
then by the rotate method: torch, split-K, the plan's launch and the `--rotate-top` best launches by flush.
Writes DIR/probe.json as it goes and prints one line per shape; stops starting shapes after --budget-s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from compress.bench.kernel_timing import call_ms, device_description, time_ms  # noqa: E402
from kernels import vptq_cluster, vptq_cuda  # noqa: E402
from kernels.cases import make_vptq  # noqa: E402

INS = [1024, 4096, 16384]
OUTS = [1024, 4096, 8192, 14336, 28672, 53248]
COMBOS = [(4096, 256), (8192, 512)]
# Split-K builds beside the default (label -> (variant, cooperative tail)).
SPLITK_BUILDS = {"splitk_w16b": ("w16b", False), "coop_w16": ("w16", True), "coop_w16b": ("w16b", True)}
NOT_CLUSTER = ("torch", "splitk", *SPLITK_BUILDS)


def rel_err(a, b) -> float:
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("inf")
    return float(((a - b).norm() / b.norm()).item())


def key(c: vptq_cluster.Launch) -> str:
    return f"g{c.gt}l{c.lt}c{c.cl}{'s' if c.smem else 'L'}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--rotate-top", type=int, default=3)
    args = ap.parse_args()
    t0 = time.time()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    vptq_cluster.prebuild(dev, [(12, 8), (13, 9), (12, 9), (13, 8)])
    vptq_cuda.prebuild(dev, ["w16", "w16b"])
    info = {**device_description(), "build_s": time.time() - t0}
    print(json.dumps(info), flush=True)
    rows = []
    for main_c, res_c in COMBOS:
        for k in INS:
            for n in OUTS:
                if time.time() - t0 > args.budget_s:
                    print(f"budget: stopped before {k}x{n} {main_c}/{res_c}", flush=True)
                    break
                d = make_vptq(n, k, main_c, res_c, "cuda", seed=k + n)
                args_d = (d["indices"], d["codebook"], d["index_bits"], d["res_indices"], d["res_codebook"],
                          d["res_index_bits"], d["scale"], d["bias"])
                x = torch.randn(1, k, device="cuda").half()
                w = (torch.randn(n, k, device="cuda") / k**0.5).half()
                ref = torch.empty(1, n, device="cuda", dtype=x.dtype)
                vptq_cuda.gemv(x, n, *args_d, ref)
                row = {"in": k, "out": n, "main": main_c, "res": res_c,
                       "plan": key(vptq_cluster.plan(n, k, sms, d["index_bits"])),
                       "flush": {"torch": time_ms(lambda: F.linear(x, w))}, "err": {}, "rotate": {}}
                o_split = torch.empty(1, n, device="cuda", dtype=x.dtype)
                row["flush"]["splitk"] = time_ms(lambda: vptq_cuda.gemv(x, n, *args_d, o_split))
                for lab, (nm, coop) in SPLITK_BUILDS.items():
                    o = torch.full((1, n), float("nan"), device="cuda", dtype=x.dtype)
                    try:
                        vptq_cuda.gemv(x, n, *args_d, o, name=nm, coop=coop)
                        row["err"][lab] = rel_err(o, ref)
                        row["flush"][lab] = time_ms(lambda o=o, nm=nm, coop=coop: vptq_cuda.gemv(x, n, *args_d, o, name=nm,
                                                                                                coop=coop))
                    except Exception as e:
                        row["err"][lab] = f"{type(e).__name__}: {e}"[:200]
                for c in vptq_cluster.candidates(n, sms):
                    o = torch.full((1, n), float("nan"), device="cuda", dtype=x.dtype)
                    try:
                        vptq_cluster.gemv(x, n, *args_d, o, launch=c)
                        row["err"][key(c)] = rel_err(o, ref)
                        row["flush"][key(c)] = time_ms(lambda c=c, o=o: vptq_cluster.gemv(x, n, *args_d, o, launch=c))
                    except Exception as e:  # a launch shape this GPU refuses: recorded, not fatal
                        row["err"][key(c)] = f"{type(e).__name__}: {e}"[:200]
                ok = {kk: v for kk, v in row["flush"].items() if kk not in NOT_CLUSTER
                      and isinstance(row["err"].get(kk), float) and row["err"][kk] < 3e-3}
                ranked = sorted(ok, key=ok.get)
                row["best_flush"] = ranked[0] if ranked else None
                # Rotate: weights from DRAM, calls back to back (the tables' default method).
                row["rotate"]["torch"] = call_ms(lambda w: F.linear(x, w), w, "rotate")
                row["rotate"]["splitk"] = call_ms(lambda dd: vptq_cuda.gemv(x, n, *dd, o_split), args_d, "rotate")
                for lab, (nm, coop) in SPLITK_BUILDS.items():
                    if isinstance(row["err"].get(lab), float):
                        o = torch.empty(1, n, device="cuda", dtype=x.dtype)
                        row["rotate"][lab] = call_ms(lambda dd, o=o, nm=nm, coop=coop: vptq_cuda.gemv(
                            x, n, *dd, o, name=nm, coop=coop), args_d, "rotate")
                for kk in dict.fromkeys([row["plan"], *ranked[: args.rotate_top]]):
                    if kk not in ok:
                        continue
                    c = next(c for c in vptq_cluster.candidates(n, sms) if key(c) == kk)
                    o = torch.empty(1, n, device="cuda", dtype=x.dtype)
                    row["rotate"][kk] = call_ms(lambda dd, c=c, o=o: vptq_cluster.gemv(x, n, *dd, o, launch=c), args_d,
                                                "rotate")
                rows.append(row)
                fl, ro = row["flush"], row["rotate"]
                bf = row["best_flush"]
                br = min((kk for kk in ro if kk not in NOT_CLUSTER), key=ro.get, default=None)
                print(f"{k:>6} {n:>6} {main_c}/{res_c:<4} flush torch {fl['torch'] * 1e3:6.1f} splitk "
                      f"{fl['splitk'] * 1e3:6.1f} " + " ".join(f"{lab} {fl.get(lab, math.nan) * 1e3:6.1f}" for lab in SPLITK_BUILDS)
                      + f" plan {row['plan']} {fl.get(row['plan'], math.nan) * 1e3:6.1f} "
                      f"best {bf} {fl.get(bf, math.nan) * 1e3:6.1f} | rotate torch {ro['torch'] * 1e3:6.1f} splitk "
                      f"{ro['splitk'] * 1e3:6.1f} " + " ".join(f"{lab} {ro.get(lab, math.nan) * 1e3:6.1f}" for lab in SPLITK_BUILDS)
                      + f" plan {ro.get(row['plan'], math.nan) * 1e3:6.1f} best {br} "
                      f"{ro.get(br, math.nan) * 1e3:6.1f}  maxerr {max([v for v in row['err'].values() if isinstance(v, float)], default=math.nan):.1e}",
                      flush=True)
                (out_dir / "probe.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
                del d, w
    print(f"probe done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
