"""Session 23: does where a layer's 2:4 values and metadata sit relative to each other move the one-token W8A16 2:4
GEMV? Session 18 found this GEMV 5-10% slower on weights allocated from blocks that earlier rows freed (the kernel
table), back to its fresh time after `torch.cuda.empty_cache()`, and the dense layers barely moved. A fresh allocator
gives every large tensor its own segment; a recycled block packs values, metadata and scales side by side. So each
weight copy here is laid out by hand in one byte pool: values at 0, then the metadata `gap` bytes after the values'
end (or the metadata first), against "separate" (plain clones, each its own allocation, the fresh-process case).

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s23/layout_probe.py OUT_JSON [NxK ...]
"""

from __future__ import annotations

import json
import sys
import time

import torch


def pooled(q: dict, gap: int, meta_first: bool) -> dict:
    """One copy of q's values and meta carved from one uint8 pool (scales cloned on their own)."""
    v, m = q["values"], q["meta"]
    vb, mb = v.numel() * v.element_size(), m.numel() * m.element_size()
    pool = torch.empty(vb + mb + gap + 4096, dtype=torch.uint8, device=v.device)
    first, second = (m, v) if meta_first else (v, m)
    fb = first.numel() * first.element_size()
    out = {}
    for t, off in ((first, 0), (second, fb + gap)):
        nb = t.numel() * t.element_size()
        view = pool[off:off + nb].view(t.dtype).view(t.shape)
        view.copy_(t)
        out["meta" if t is m else "values"] = view
    out["w_scale"] = q["w_scale"].clone()
    out["_pool"] = pool
    return out


def main():
    out_json = sys.argv[1]
    shapes = [tuple(int(s) for s in a.split("x")) for a in sys.argv[2:]] or [
        (4096, 14336), (1024, 8192), (4096, 4096), (8192, 8192), (28672, 8192), (1024, 4096)]
    from compress.bench.kernel_timing import L2_MULTIPLE, copies_needed, graph_us, l2_bytes
    from kernels import sparse24 as sp
    from kernels.cases import make_sparse24, rel_err

    t0 = time.time()
    layouts = {"separate": None, **{f"gap {g}": (g, False) for g in (0, 512, 4096, 65536, 1 << 20, (1 << 21) + 512)},
               "meta first, gap 0": (0, True), "meta first, gap 4096": (4096, True)}
    rows = []
    for n, k in shapes:
        q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        x = torch.randn(1, k, device="cuda").half()
        want = sp.sparse24_w8a16_linear_ref(x, q["values"], q["meta"], q["w_scale"])
        nbytes = sum(q[key].numel() * q[key].element_size() for key in ("values", "meta", "w_scale"))
        copies = copies_needed(nbytes, l2_bytes("cuda"), L2_MULTIPLE)
        for rep in range(2):  # each layout twice, in turn: drift shows as a difference between the two passes
            for name, lay in layouts.items():
                sets = [({key: q[key].clone() for key in ("values", "meta", "w_scale")} if lay is None else pooled(q, *lay))
                        for _ in range(copies)]
                err = rel_err(sp.sparse24_w8a16_linear(x, sets[0]["values"], sets[0]["meta"], sets[0]["w_scale"]), want)
                us = graph_us([lambda w=w: sp.sparse24_w8a16_linear(x, w["values"], w["meta"], w["w_scale"]) for w in sets])
                addr = [(w["meta"].data_ptr() - w["values"].data_ptr()) for w in sets[:2]]
                rows.append({"shape": f"{n}x{k}", "layout": name, "pass": rep, "us": us, "err": err, "copies": copies,
                             "meta_minus_values": addr})
                print(f"[{time.time() - t0:5.1f} s] {n}x{k} pass {rep} {name:>22}: {us:7.2f} us (err {err:.1e}, "
                      f"meta - values {addr[0]})", flush=True)
                del sets
                torch.cuda.empty_cache()
    with open(out_json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
