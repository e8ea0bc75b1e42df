"""Session 40: host cost of kernels.op_dispatch.on_input_device on the GPU machine. Calls issued back to back (the
GPU runs each in a few us, the host is slower, so wall time / calls is the host's time a call), each public function
against its undecorated body (`__wrapped__`), in turns, 5 rounds; also a W4A16 runtime layer's forward (called as
`layer.forward(x)`, not `layer(x)`: nn.Module.__call__ would be in one arm only; call 2 made that mistake).

Usage (repository root, GPU machine): python3 bench/results/h200/kernels_s40/guard_cost.py OUT.json
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch


def per_call_us(fn, calls: int = 5000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    from kernels import w4a16_ws
    from kernels.cases import int4_runtime_layer, make_int4
    from kernels.op_dispatch import on_input_device

    dev = torch.device("cuda")
    q = make_int4(4096, 4096, 128, True, torch.float16, dev)
    x = torch.randn(1, 4096, device=dev, dtype=torch.float16)
    layer = int4_runtime_layer(4096, 4096, True, dev)
    layer(x)  # the path table measures once
    t = torch.ones(4, device=dev)
    bare = lambda a: a  # noqa: E731
    guarded = on_input_device(bare)
    arms = {
        "guard alone (identity, guarded)": lambda: guarded(t),
        "guard alone (identity, bare)": lambda: bare(t),
        "w4a16_ws_gemv (guarded)": lambda: w4a16_ws.w4a16_ws_gemv(x, q["qweight"], q["scales"], None, 128),
        "w4a16_ws_gemv (__wrapped__)": lambda: w4a16_ws.w4a16_ws_gemv.__wrapped__(x, q["qweight"], q["scales"], None, 128),
        "QuantLinear.forward (guarded)": lambda: layer.forward(x),
        "QuantLinear.forward (__wrapped__)": lambda: type(layer).forward.__wrapped__(layer, x),
    }
    got = {k: [] for k in arms}
    for _ in range(5):
        for k, f in arms.items():
            got[k].append(per_call_us(f))
    out = {k: {"median_us": statistics.median(v), "rounds_us": v} for k, v in got.items()}
    for k, v in out.items():
        print(f"{k:40s} {v['median_us']:7.2f} us  rounds {', '.join(f'{t:.2f}' for t in v['rounds_us'])}")
    json.dump({"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "arms": out}, open(sys.argv[1], "w"),
              indent=1)


if __name__ == "__main__":
    main()
