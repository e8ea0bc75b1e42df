"""Session 19: does where the weights sit in memory move the one-token W8A16 2:4 GEMV? Session 18 (call 6) saw it 5-10%
slower inside the kernel table's process, on weights cut from blocks earlier rows had freed, and fresh again after
`torch.cuda.empty_cache()`. Here the same layer is timed (rotating weight copies, one CUDA graph, as the table does) with
its copies placed on purpose:

  fresh        empty_cache, then the copies as `kernel_timing.weight_copies` makes them (each tensor its own block)
  v|m          values and meta of a copy in one buffer, meta right after the values (what a freed large block gives)
  m|v          the same, meta first
  v|1M|m       values, 1 MiB gap, meta;  v|2M+4K|m: a 2 MiB + 4 KiB gap
  arena        all copies' values in one buffer, all metas in a second
  recycled     the table's dense fp16 copies of this shape allocated and freed first (no empty_cache), then the copies
  fresh2       empty_cache and fresh copies again (drift check)
fp16 `F.linear` (rotating copies) is timed fresh and recycled too (its copies cut from freed blocks twice their size). Every arm's output is checked against the reference.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s19/alloc_probe.py OUT
Env: PROBE_SHAPES="NxK,..." (default 8B down, 70B q/o, 8B q/o, 70B k/v), PROBE_REPEAT (rounds over the arms, default 2;
the best of the rounds is kept and every round printed).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

SHAPES = [(4096, 14336), (8192, 8192), (4096, 4096), (1024, 8192)]
if os.environ.get("PROBE_SHAPES"):
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["PROBE_SHAPES"].split(",")]
REPEAT = int(os.environ.get("PROBE_REPEAT", "2"))
ALIGN = 512


def _up(v: int) -> int:
    return -(-v // ALIGN) * ALIGN


def _carve(buf: torch.Tensor, off: int, like: torch.Tensor) -> torch.Tensor:
    nbytes = like.numel() * like.element_size()
    t = buf[off:off + nbytes].view(like.dtype).view(like.shape)
    t.copy_(like)
    return t


def joint(p: dict, count: int, order: str, gap: int = 0) -> list:
    """count copies, each one buffer holding values and meta in `order` ("vm" or "mv") with `gap` bytes between."""
    v, m = p["values"], p["meta"]
    vb, mb = _up(v.numel()), _up(m.numel() * 4)
    sets = []
    for _ in range(count):
        buf = torch.empty(vb + gap + mb, dtype=torch.uint8, device=v.device)
        if order == "vm":
            vv, mm = _carve(buf, 0, v), _carve(buf, _up(vb + gap), m)
        else:
            mm, vv = _carve(buf, 0, m), _carve(buf, _up(mb + gap), v)
        sets.append({"values": vv, "meta": mm, "w_scale": p["w_scale"].clone()})
    return sets


def arena(p: dict, count: int) -> list:
    v, m = p["values"], p["meta"]
    vb, mb = _up(v.numel()), _up(m.numel() * 4)
    vbuf = torch.empty(vb * count, dtype=torch.uint8, device=v.device)
    mbuf = torch.empty(mb * count, dtype=torch.uint8, device=v.device)
    return [{"values": _carve(vbuf, i * vb, v), "meta": _carve(mbuf, i * mb, m), "w_scale": p["w_scale"].clone()}
            for i in range(count)]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    from compress.bench import kernel_timing as kt
    from kernels import sparse24 as sp
    from kernels.cases import make_sparse24, rel_err

    l2 = kt.l2_bytes("cuda")
    rows = []
    for n, k in SHAPES:
        torch.cuda.empty_cache()
        p = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        x = torch.randn(1, k, device="cuda").half()
        want = sp.sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
        count = kt.copies_needed(kt.weight_bytes(p), l2)
        wf = (torch.randn(n, k, device="cuda") / k ** 0.5).half()
        fcount = kt.copies_needed(wf.numel() * 2, l2)

        def gemv(sets):
            for s in sets:
                err = rel_err(sp.sparse24_w8a16_linear(x, s["values"], s["meta"], s["w_scale"]), want)
                if not err < 3e-3:
                    raise RuntimeError(f"{n}x{k}: wrong output on a placed copy (rel err {err})")
            return kt.graph_us([lambda s=s: sp.sparse24_w8a16_linear(x, s["values"], s["meta"], s["w_scale"])
                                for s in sets])

        def fp16(ws):
            return kt.graph_us([lambda w=w: torch.nn.functional.linear(x, w) for w in ws])

        def arm(name):
            if name in ("fresh", "fresh2"):
                torch.cuda.empty_cache()
                return kt.weight_copies(p)
            if name == "v|m":
                return joint(p, count, "vm")
            if name == "m|v":
                return joint(p, count, "mv")
            if name == "v|1M|m":
                return joint(p, count, "vm", 1 << 20)
            if name == "v|2M+4K|m":
                return joint(p, count, "vm", (2 << 20) + 4096)
            if name == "arena":
                return arena(p, count)
            if name == "recycled":
                torch.cuda.empty_cache()
                dense = [wf.clone() for _ in range(fcount)]
                del dense
                return kt.weight_copies(p)
            raise ValueError(name)

        names = ["fresh", "v|m", "m|v", "v|1M|m", "v|2M+4K|m", "arena", "recycled", "fresh2"]
        r = {"n": n, "k": k, "copies": count, "us": {a: [] for a in names}, "fp16_us": {"fresh": [], "recycled": []}}
        for _ in range(REPEAT):
            for name in names:
                sets = arm(name)
                r["us"][name].append(gemv(sets))
                del sets
            torch.cuda.empty_cache()
            ws = [wf] + [wf.clone() for _ in range(fcount - 1)]
            r["fp16_us"]["fresh"].append(fp16(ws))
            del ws
            torch.cuda.empty_cache()
            big = [torch.empty(4 * n * k, dtype=torch.int8, device="cuda") for _ in range(fcount)]
            del big
            ws = [wf] + [wf.clone() for _ in range(fcount - 1)]
            r["fp16_us"]["recycled"].append(fp16(ws))
            del ws
        rows.append(r)
        best = {a: min(v) for a, v in r["us"].items()}
        f16 = min(r["fp16_us"]["fresh"])
        print(f"[{time.time() - t0:5.1f} s] {n}x{k} ({count} copies; fp16 fresh {f16:.2f} / recycled "
              f"{min(r['fp16_us']['recycled']):.2f} us):", flush=True)
        for a, v in r["us"].items():
            print(f"    {a:10s} best {best[a]:7.2f} us  rounds {' '.join(f'{u:.2f}' for u in v)}", flush=True)
        with open(f"{out}/alloc_probe.json", "w") as f:
            json.dump(rows, f, indent=1)
        del p, wf


if __name__ == "__main__":
    main()
