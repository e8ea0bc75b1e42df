"""Which CUDA kernel serves a batch-1 VPTQ layer: measured once per layer shape, on the device.

Two kernels decode the same format (kernels/vptq_cuda.py: split-K through a workspace, best when a layer
fills the chip; kernels/vptq_cluster.py: split-K inside a cluster, with less fixed cost per call, best on
small layers). Neither wins everywhere and the crossover moves with in/out features, codebook sizes and
the GPU (bench/results/h100/kernels_s8_vptq/README.md), so the first eager call of a shape times every
launch of both (the split-K kernel in its SPLITK_VARIANTS builds, with and without its cooperative tail;
each call captured in a CUDA graph, timed with the L2 flushed, median of TRIALS) and keeps the fastest
for the process. Inside a CUDA-graph capture nothing can be timed: an unmeasured shape then runs the
split-K kernel's default build and plan. The two kernels sum in different orders, so outputs can differ
in the last bits between processes that chose differently; COMPRESS_VPTQ_KERNEL=splitk|cluster pins one.
"""

from __future__ import annotations

import os
import statistics
from typing import Callable

import torch

from compress.errors import CompressError

CHOICES = ("auto", "cluster", "splitk")
# Split-K builds timed (kernels/vptq_cuda.py VARIANTS): codebook copied per thread, or by bulk copy.
SPLITK_VARIANTS = ("w16", "w16b")
TRIALS = 7

_chosen: dict[tuple, object] = {}
_flush: dict[torch.device, torch.Tensor] = {}


def choice() -> str:
    name = os.environ.get("COMPRESS_VPTQ_KERNEL", "auto")
    if name not in CHOICES:
        raise CompressError(f"COMPRESS_VPTQ_KERNEL={name!r} is not one of {list(CHOICES)}")
    return name


def _flush_buffer(device: torch.device) -> torch.Tensor:
    if device not in _flush:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)
        _flush[device] = torch.empty(l2, dtype=torch.int32, device=device)  # 4 bytes each: 4x the L2
    return _flush[device]


def _cold_us(fn: Callable[[], object]) -> float:
    """Median microseconds of one call (captured in a CUDA graph) with the L2 flushed before each trial, so the
    layer's weights come from DRAM as in a decode step: a back-to-back loop would keep a small layer's indices
    in L2 and favour the wrong kernel."""
    fn()  # eager first: a launch this GPU refuses raises here, outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    flush = _flush_buffer(torch.device("cuda", torch.cuda.current_device()))
    g.replay()
    times = []
    for _ in range(TRIALS):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    del g
    return statistics.median(times)


def pick(key: tuple, options: dict[object, Callable[[], object]], fallback: object) -> object:
    """The label of the fastest of `options` (label -> one call) for this layer shape (`key`), timed on
    first use; `fallback` inside a CUDA-graph capture when the shape was never timed (module docstring)."""
    if key in _chosen:
        return _chosen[key]
    if torch.cuda.is_current_stream_capturing():
        return fallback
    times = {}
    for label, run in options.items():
        try:
            times[label] = _cold_us(run)
        except CompressError:  # e.g. a cluster size this GPU cannot co-schedule: not a candidate
            continue
    _chosen[key] = min(times, key=times.get)
    return _chosen[key]


def decided(key: tuple) -> object | None:
    """The label kept for `key`, or None if that shape was never timed."""
    return _chosen.get(key)


def chosen() -> dict[tuple, object]:
    """The choices made so far (for reports): shape key -> ("splitk", variant, coop) or a cluster Launch."""
    return dict(_chosen)


def describe(n: int, k: int) -> str | None:
    """The kernel chosen for the latest measured shape with these out/in features, for benchmark rows;
    None if none was measured."""
    for key, v in reversed(list(_chosen.items())):
        if key[2:4] == (n, k):
            if isinstance(v, tuple):
                return f"splitk {v[1]}{' coop' if v[2] else ''}"
            return f"cluster gt={v.gt} lt={v.lt} cl={v.cl} {'smem' if v.smem else 'l1'}"
    return None
