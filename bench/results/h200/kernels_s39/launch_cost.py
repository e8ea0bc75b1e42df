"""Session 39: host microseconds of one eager call of the one-token W4A16 GEMVs and their parts, before and after
their launchers stopped asking the CUDA runtime for occupancy and shared-memory limits on every launch
(kernels/csrc/launch_ex.cuh `resident_ctas`) and took the stream handle from torch's raw-stream call.

The "before" library is session 38's kernels/csrc/w4a16_ws_gemv.cu, built from a copy the device call carries
(kernels/csrc/w4a16_ws_gemv_s38.cu, untracked; .kcache/base.tar.xz). Per row, 2000 calls issued back to back after
5 warm-up calls, host time per call (perf_counter; the GPU keeps up unless the kernel is longer, so `wall` -- the same
calls until the GPU is done -- is printed too). Shapes: 8B q/o (4096 x 4096) and the fused gate/up (28672 x 4096).
Usage: python3 launch_cost.py OUT.json
"""
from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from kernels import cuda_build, w4a16_cc, w4a16_cuda, w4a16_ws
from kernels.cases import int4_runtime_layer, make_int4

CALLS = 2000
OLD_SRC = Path("kernels/csrc/w4a16_ws_gemv_s38.cu")


def per_call_us(fn) -> tuple[float, float]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return 1e6 * (t1 - t0) / CALLS, 1e6 * (time.perf_counter() - t0) / CALLS


def raw_call(lib, x, p, out, n, k, config, stream):
    args = (x.data_ptr(), 0, p["qweight"].data_ptr(), p["scales"].data_ptr(), None, out.data_ptr(), n, k, 128, config,
            1, 0, stream)
    return lambda: lib.w4ws_gemv(*args)


def main() -> None:
    dev = torch.device("cuda")
    new = w4a16_ws.build(dev)
    old = None
    if OLD_SRC.exists():
        path = cuda_build.library_path(OLD_SRC, "ws", [], cuda_build.arch(dev))
        if path.exists():
            old = ctypes.CDLL(str(path))
            w4a16_ws._bind(old)
    print(f"before library: {'found' if old is not None else 'MISSING'}", flush=True)
    rows = []
    for n, k in ((4096, 4096), (28672, 4096)):
        p = make_int4(n, k, 128, True, torch.float16, dev, seed=1)
        w = torch.randn(n, k, device=dev).half()
        x = torch.randn(1, k, device=dev).half()
        out = torch.empty(1, n, device=dev, dtype=torch.float16)
        layer = int4_runtime_layer(n, k, True, dev, seed=1)
        config = w4a16_ws.config_for(n, k, w4a16_cuda.gpu_name(dev))
        stream = torch.cuda.current_stream(dev).cuda_stream
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        ops = {
            "fp16 F.linear (cuBLAS)": lambda: F.linear(x, w),
            "torch.empty(1, N)": lambda: torch.empty(1, n, device=dev, dtype=torch.float16),
            "torch.cuda.current_stream(dev).cuda_stream": lambda: torch.cuda.current_stream(dev).cuda_stream,
            "torch._C._cuda_getCurrentRawStream(i)": lambda: torch._C._cuda_getCurrentRawStream(idx),
            "ws GEMV ctypes call, session-38 library": raw_call(old, x, p, out, n, k, config, stream) if old else None,
            "ws GEMV ctypes call, this library": raw_call(new, x, p, out, n, k, config, stream),
            "w4a16_ws._launch": lambda: w4a16_ws._launch(x, p["qweight"], p["scales"], None, 128),
            "w4a16_ws_gemv (public)": lambda: w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"], None, 128),
            "w4a16_cc_gemv (public)": lambda: w4a16_cc.w4a16_cc_gemv(x, p["qweight"], p["scales"], None, 128),
            "w4a16_cuda.w4a16_gemv (public)": lambda: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], None, 128),
            "runtime Int4Linear.forward": lambda: layer(x),
        }
        for name, fn in ops.items():
            if fn is None:
                continue
            try:
                issue, wall = per_call_us(fn)
            except Exception as e:  # report, keep going
                print(f"{n}x{k} {name:45s} FAILED {str(e)[:150]}", flush=True)
                continue
            rows.append({"n": n, "k": k, "op": name, "issue_us": issue, "wall_us": wall})
            print(f"{n}x{k} {name:45s} issue {issue:7.2f} us  wall {wall:7.2f} us", flush=True)
        del p, w, layer
    # Call 4: layers of another K in turns, as a decode step runs them (o 4096 x 4096, then down 4096 x 14336: the same
    # config, so one kernel whose dynamic shared memory changes each call). Raw ctypes calls, before / after.
    alt = []
    shapes = [(4096, 4096), (4096, 14336)]
    ps = [make_int4(n, k, 128, True, torch.float16, dev, seed=2) for n, k in shapes]
    xs = [torch.randn(1, k, device=dev).half() for _, k in shapes]
    outs = [torch.empty(1, n, device=dev, dtype=torch.float16) for n, _ in shapes]
    stream = torch.cuda.current_stream(dev).cuda_stream
    for tag, lib in (("session-38 library", old), ("this library", new), ("session-38 library", old), ("this library", new)):
        if lib is None:
            continue
        calls = [raw_call(lib, x, p, o, n, k, w4a16_ws.DEFAULT_CONFIG, stream) for (n, k), p, x, o in zip(shapes, ps, xs, outs)]
        issue, wall = per_call_us(lambda: (calls[0](), calls[1]()))
        alt.append({"lib": tag, "issue_us_per_pair": issue, "wall_us_per_pair": wall})
        print(f"alternating K 4096 / 14336, default config, {tag:20s}: issue {issue:7.2f} us  wall {wall:7.2f} us a pair",
              flush=True)
    with open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/launch_cost.json", "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "calls": CALLS, "rows": rows, "alternating": alt}, f, indent=1)


if __name__ == "__main__":
    main()
