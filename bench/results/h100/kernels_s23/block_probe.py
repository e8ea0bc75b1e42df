"""Session 23, after layout_probe.py found the values/metadata placement neutral: which allocator state slows the
one-token W8A16 2:4 GEMV in the kernel table (session 18: 5-10% on weights from blocks that earlier rows freed, fresh
again after `torch.cuda.empty_cache()`)? The same M = 1 call, rotate timing over hand-made copies, in four states:
- fresh: every tensor its own new segment (empty cache first);
- carved: copies cut from one large block just freed (as the table's rows leave them);
- carved, pool first written by a copy kernel (the freed block held live data before);
- crowded: fresh copies while 40 GB of other tensors are live in 2 GB blocks;
with fp16 F.linear of the same shape as the contrast the table saw move 1-2%.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s23/block_probe.py OUT_JSON [NxK ...]
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.nn.functional as F


def main():
    out_json = sys.argv[1]
    shapes = [tuple(int(s) for s in a.split("x")) for a in sys.argv[2:]] or [(4096, 14336), (1024, 8192), (28672, 8192)]
    from compress.bench.kernel_timing import L2_MULTIPLE, copies_needed, graph_us, l2_bytes
    from kernels import sparse24 as sp
    from kernels.cases import make_sparse24

    t0 = time.time()
    rows = []
    for n, k in shapes:
        q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        x = torch.randn(1, k, device="cuda").half()
        w16 = torch.randn(n, k, device="cuda").half()
        keys = ("values", "meta", "w_scale")
        nb = sum(q[key].numel() * q[key].element_size() for key in keys)
        c24 = copies_needed(nb, l2_bytes("cuda"), L2_MULTIPLE)
        c16 = copies_needed(w16.numel() * 2, l2_bytes("cuda"), L2_MULTIPLE)

        def time_both(state):
            sets = [{key: q[key].clone() for key in keys} for _ in range(c24)]
            us24 = graph_us([lambda w=w: sp.sparse24_w8a16_linear(x, w["values"], w["meta"], w["w_scale"]) for w in sets])
            del sets
            dense = [w16.clone() for _ in range(c16)]
            us16 = graph_us([lambda w=w: F.linear(x, w) for w in dense])
            del dense
            rows.append({"shape": f"{n}x{k}", "state": state, "w8a16_24_us": us24, "fp16_us": us16,
                         "reserved_gb": torch.cuda.memory_reserved() / 1e9})
            print(f"[{time.time() - t0:5.1f} s] {n}x{k} {state:>28}: W8A16 2:4 {us24:7.2f} us | fp16 {us16:7.2f} us | "
                  f"reserved {rows[-1]['reserved_gb']:.1f} GB", flush=True)

        for rep in range(2):
            torch.cuda.empty_cache()
            time_both(f"fresh {rep}")
            big = torch.empty(int(1.2 * (c24 * nb + c16 * w16.numel() * 2)), dtype=torch.uint8, device="cuda")
            del big
            time_both(f"carved {rep}")
            torch.cuda.empty_cache()
            big = torch.empty(int(1.2 * (c24 * nb + c16 * w16.numel() * 2)), dtype=torch.uint8, device="cuda")
            big.fill_(7)
            torch.cuda.synchronize()
            del big
            time_both(f"carved, written {rep}")
            torch.cuda.empty_cache()
            crowd = [torch.empty(2 << 30, dtype=torch.uint8, device="cuda") for _ in range(20)]
            time_both(f"crowded {rep}")
            del crowd
            torch.cuda.empty_cache()
    with open(out_json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
