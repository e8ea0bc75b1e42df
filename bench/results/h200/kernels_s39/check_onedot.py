"""Session 39: the one-product-a-step tile (onedot.patch applied to kernels/w4a16.py) against w4a16_linear_ref, CPU
interpreter (TRITON_INTERPRET=1, small odd shapes) or GPU. Usage: PYTHONPATH=. python3 check_onedot.py"""
import os, sys, torch
from kernels import w4a16
from tests.test_w4a16_cuda import layer, rel_err, TOL
dev = "cuda" if torch.cuda.is_available() else "cpu"
cases = [(40, 256, 3), (33, 192, 5), (100, 320, 17)] if dev == "cpu" else [(4096, 4096, 64), (1024, 4096, 64), (1000, 2112, 40), (4096, 4096, 16)]
bad = 0
for dtype in (torch.float16, torch.bfloat16):
    for gs, sym in ((128, True), (64, False), (128, False), (64, True)):
        for n, k, m in cases:
            p = layer(n, k, gs, sym, dtype, device=dev, seed=1)
            x = torch.randn(m, k, device=dev).to(dtype)
            ref = w4a16.w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
            for bm, bn, nb, w, st in ((16, 64, 2, 4, 2), (64, 128, 2, 8, 3), (32, 64, 2, 4, 3), (64, 128, 4, 8, 2)):
                if dev == "cpu" and (bm, bn) == (64, 128) and nb == 4: continue
                cfg = {"kind": "tc", "BM": bm, "BN": bn, "NB": nb, "num_warps": w, "num_stages": st, "one_dot": True, "split": 2}
                out = w4a16._launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=cfg)
                e = rel_err(out, ref)
                ok = e < TOL[dtype]
                bad += not ok
                print(f"{str(dtype)[6:]} g{gs} {'sym' if sym else 'asym'} {n}x{k} M={m} {bm}x{bn} nb{nb}: {e:.2e} {'ok' if ok else 'BAD'}", flush=True)
print("bad", bad); sys.exit(1 if bad else 0)
