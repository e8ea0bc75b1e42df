"""The README's table from the two calls' ab.json: per Llama-3 shape and M, torch fp16 F.linear and ours with the
committed defaults (the faster of the Triton launcher and the CUDA GEMV, as the kernels table chooses), each time
taken in the same process as its fp16 time. M = 1 from call 1 (its CUDA source for <= 8 tokens compiles to the same
SASS as the committed one; call 2's build had a different split-K tail there, since reverted); M = 16 / 32 / 64 from
call 2: a config the commit took from a pick is that pick's second timing, else the config's own timing.

Usage: python3 bench/results/h100/kernels_s8_w4a16/summarize.py
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
c1 = json.loads((HERE / "call1" / "ab.json").read_text())["rows"]
c2 = json.loads((HERE / "call2" / "ab.json").read_text())["rows"]
PICK_MIN_GAIN = 0.98  # the commit took a pick only where it beat the config before by > 2%


def committed(r: dict, m: int) -> tuple[float, str, float | None, float | None]:
    """(ours us, path, CUDA us, Triton us) with the committed defaults, from one call-2 row."""
    cuda = r["cur"]["us"], "cuda " + r["cur"]["plan"]
    if "pick" in r and r["pick"]["us_again"] < PICK_MIN_GAIN * r["cur"]["us"]:
        cuda = r["pick"]["us_again"], "cuda " + r["pick"]["key"]
    tri = r["triton"]["us"], "triton"
    if "tpick" in r:
        c = r["tpick"]["cfg"]
        tri = r["tpick"]["us_again"], f"triton {c['BM']}x{c['BN']}x{c['NB']}" + (f" waves {c['waves']}" if "waves" in c else "")
    best = min(cuda, tri)
    return best[0], best[1], cuda[0], tri[0]


rows = []
for key, r in c1.items():
    label, m = key.split("|")
    if m == "1":
        rows.append((label, 1, r["fp16_us"], r["cur"]["us"], "cuda " + r["cur"]["plan"], r["cur"]["us"], None,
                     r.get("old", {}).get("us")))
for key, r in c2.items():
    label, m = key.split("|")
    if m != "1":
        ours, path, cuda, tri = committed(r, int(m))
        rows.append((label, int(m), r["fp16_us"], ours, path, cuda, tri, r.get("old", {}).get("us")))
order = {k.split("|")[0]: i for i, k in enumerate(c2)}
rows.sort(key=lambda t: (t[1], order[t[0]]))
print("| layer | M | fp16 us | ours us | speedup | path | CUDA GEMV us | Triton us | CUDA, session-start source us |")
print("|---|---|---|---|---|---|---|---|---|")
for label, m, fp, ours, path, cuda, tri, old in rows:
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"| {label} | {m} | {fp:.2f} | {ours:.2f} | {fp / ours:.2f}x | {path.replace('|', ' ')} | {f(cuda)} | {f(tri)} | {f(old)} |")
print()
for m in (1, 16, 32, 64):
    sp = [fp / ours for _, mm, fp, ours, *_ in rows if mm == m]
    print(f"M={m}: median {statistics.median(sp):.2f}x over {len(sp)} shapes; slower than fp16: {sum(s < 1 for s in sp)}"
          + (f" ({', '.join(f'{l} {fp / o:.2f}x' for l, mm, fp, o, *_ in rows if mm == m and fp / o < 1)})" if any(s < 1 for s in sp) else ""))
