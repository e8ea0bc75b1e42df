"""Session 38: what a call of each public kernel costs on the host (eager PyTorch, no CUDA graph). Call 2's one-call
eager timings of the W4A16 Triton launcher at 64 tokens read 145-210 us (CUDA events around one call on an idle GPU)
for kernels that run 12-16 us, against 39 us for cuBLAS fp16. Decode and prefill in `compress bench e2e` replay CUDA
graphs, so this never showed in its tables; an eager caller (transformers' generate on a `compress.runtime` model,
a prefill outside a graph) pays it on every layer.

Per op, 8B q/o shape (4096 x 4096), after 5 warm-up calls: `issue` = host time per call over 200 calls issued back to
back without a sync (what the host spends per call; the GPU keeps up unless the kernel is longer); `wall` = the same
200 calls until the GPU is done, per call. Parts of the W4A16 Triton launcher are timed alone (`kernels/w4a16.py`
`_config`, `_split`, `splitk_buffers`, the custom-op dispatch against `_launch` called directly).
Usage: python3 eager_probe.py [OUT_JSON]
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.nn.functional as F

from kernels import w4a16, w4a16_cuda, w4a16_ws
from kernels.cases import int4_runtime_layer, make_int4, make_w8a8
from kernels.w8a8 import w8a8_linear

N = K = 4096
CALLS = 200


def per_call_us(fn) -> tuple[float, float]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return 1e6 * (t1 - t0) / CALLS, 1e6 * (t2 - t0) / CALLS


def host_us(fn, calls: int = 2000) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e6 * (time.perf_counter() - t0) / calls


def main() -> None:
    dev = torch.device("cuda")
    p = make_int4(N, K, 128, True, torch.float16, dev, seed=1)
    w = torch.randn(N, K, device=dev).half()
    q8, s8 = make_w8a8(N, K, dev, seed=1)
    layer = int4_runtime_layer(N, K, True, dev, seed=1)
    rows = []
    for m in (1, 16, 64):
        x = torch.randn(m, K, device=dev).half()
        ops = {
            "fp16 F.linear": lambda: F.linear(x, w),
            # Calls 3 and 4 labelled the public function "custom op": before a179493 it always went through the op.
            "w4a16_linear (Triton, public function)": lambda: w4a16.w4a16_linear(x, p["qweight"], p["scales"], None, 128),
            "torch.ops.compress.w4a16_linear (op)": lambda: torch.ops.compress.w4a16_linear(x, p["qweight"], p["scales"],
                                                                                              None, 128),
            "w4a16._launch (Triton, no dispatch)": lambda: w4a16._launch(x, p["qweight"], p["scales"], None, 128),
            "w8a8_linear": lambda: w8a8_linear(x, q8, s8),
            "runtime Int4Linear.forward": lambda: layer(x),
        }
        if m <= 64:
            ops["w4a16_cuda.w4a16_gemv"] = lambda: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], None, 128)
        if m == 1:
            ops["w4a16_ws_gemv"] = lambda: w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"], None, 128)
        for name, fn in ops.items():
            try:
                issue, wall = per_call_us(fn)
            except Exception as e:  # report, keep going
                print(f"M={m:3d} {name:40s} FAILED {str(e)[:150]}", flush=True)
                continue
            rows.append({"m": m, "op": name, "issue_us": issue, "wall_us": wall})
            print(f"M={m:3d} {name:40s} issue {issue:8.1f} us/call   wall {wall:8.1f} us/call", flush=True)
        cfg = w4a16._config(m, N, K)
        parts = {
            "_config": lambda: w4a16._config(m, N, K),
            "_split": lambda: w4a16._split(cfg, 32, 16, dev),
            "splitk_buffers": lambda: w4a16.splitk_buffers(dev, 32, 4, 64 * 128),
            "torch.empty(m, n)": lambda: torch.empty(m, N, device=dev, dtype=torch.float16),
        }
        for name, fn in parts.items():
            us = host_us(fn)
            rows.append({"m": m, "op": f"part {name}", "issue_us": us})
            print(f"M={m:3d}   part {name:32s} {us:8.2f} us", flush=True)
        print(f"M={m:3d}   layer path chosen: {getattr(layer, '_chosen_paths_cache', {})and list(layer._chosen_paths_cache)}")
    # Where the Triton launcher's host time goes: cProfile over 300 calls at 64 tokens, the 25 largest own times.
    import cProfile
    import pstats

    x = torch.randn(64, K, device=dev).half()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        w4a16.w4a16_linear(x, p["qweight"], p["scales"], None, 128)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if sys.argv[1:]:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
