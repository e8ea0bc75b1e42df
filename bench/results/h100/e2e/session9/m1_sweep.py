"""Session 9: the W4A16 CUDA GEMV's launch config at M = 1 on the Llama-3 shapes whose speedup sits at the kernel
table's M = 1 median (issue 3: >= 3.0x; session 9's table: 70B q/o 2.989x and 8B gate/up 3.007x, median 2.998x).

Per shape (N, K): torch fp16 F.linear, the committed default ("cur") and candidates (variant, waves, cluster), every
one by compress.bench.kernel_timing.call_ms(method="rotate") -- the kernel table's method -- in one process, each
checked against w4a16_linear_ref first; the fastest candidate is timed again (its second time is the one reported,
against cur timed again too). Prints one line per config and a PICK line per shape.

Usage (repository root, GPU machine): python3 bench/results/h100/e2e/session9/m1_sweep.py [N,K ...]
"""

from __future__ import annotations

import itertools
import sys
import time

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import w4a16_cuda
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

VARIANTS = ("w8b2s3", "w8b2s4", "w16b2s2", "w16b2s3", "w4b2s4", "w4b4s3", "w4b8s2", "w2b2s6")
WAVES = (0.5, 1.0, 2.0)
CLUSTER = (False, True)


def main() -> None:
    shapes = [tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or [(8192, 8192), (14336, 4096)]
    t0 = time.time()
    w4a16_cuda.prebuild(torch.device("cuda"), list(VARIANTS))
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    for n, k in shapes:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        x = torch.randn(1, k, device="cuda").half()
        ref = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
        w = torch.randn(n, k, device="cuda").half()
        fp16 = 1000 * kt.call_ms(lambda w_: F.linear(x, w_), w)
        del w
        name, waves, cluster, _ = w4a16_cuda.default_config(1, n, k)

        def timed(nm, wv, cl):
            def call(p_):
                return w4a16_cuda._launch(x, p_["qweight"], p_["scales"], None, 128, name=nm, waves=wv, cluster=cl)
            out = call(p)
            err = float((out.float() - ref.float()).norm() / ref.float().norm())
            if not err < 1e-3:
                return None, err
            return 1000 * kt.call_ms(call, p), err

        cur, _ = timed(name, waves, cluster)
        print(f"{n}x{k} fp16 {fp16:.2f} us; cur {name}/{waves}/{int(cluster)} {cur:.2f} us = {fp16 / cur:.3f}x", flush=True)
        best = None
        for nm, wv, cl in itertools.product(VARIANTS, WAVES, CLUSTER):
            us, err = timed(nm, wv, cl)
            if us is None:
                print(f"  {nm}/{wv}/{int(cl)} wrong (rel err {err:.1e})", flush=True)
                continue
            print(f"  {nm}/{wv}/{int(cl)} {us:.2f} us = {fp16 / us:.3f}x", flush=True)
            if best is None or us < best[0]:
                best = (us, nm, wv, cl)
        _, nm, wv, cl = best
        again, _ = timed(nm, wv, cl)
        cur2, _ = timed(name, waves, cluster)
        print(f"PICK {n}x{k} {nm}/{wv}/{int(cl)} {again:.2f} us = {fp16 / again:.3f}x (again); cur again {cur2:.2f} us = "
              f"{fp16 / cur2:.3f}x", flush=True)


if __name__ == "__main__":
    main()
