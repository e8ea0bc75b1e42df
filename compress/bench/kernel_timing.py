"""Device timing for `compress bench kernels` (and its config sweep): per-call milliseconds of a layer call,
measured the same way for our kernels, torch fp16 and the peers, plus the copy bandwidth the tables (and the
end-to-end bound) compare to, which is timed on its own, outside any graph (`copy_bandwidth_gbs`).

Two methods (`call_ms(fn, weights, method=)`):

- "rotate" (the default of the tables; decode-shaped): the call is captured in one CUDA graph that replays it
  at least MIN_CALLS (120) times back to back, each call on its own copy of the layer's weights, the copies
  together at least L2_MULTIPLE (2.5) x the L2 cache, so every call reads its weights from DRAM as in a decode
  step over a model much larger than the L2 (calls so long that 120 of them would take over MAX_GRAPH_MS = 25 ms:
  fewer, at least one pass over the copies). Nothing runs between the calls: no flush (whose dirty lines
  would be written back inside the timed region), no launch gaps (graph replay), and a kernel may overlap the
  previous call's tail exactly as it would after the previous layer. Per-call time = median over REPS replays
  (CUDA events) / calls in the graph. Activations stay the same tensor (a decode step's activations come
  from the previous layer, in L2). This is session 4's method for the W4A16 GEMV
  (bench/results/h100/kernels/w4a16_cuda_s4_notes.md), generalised to any call and weight set.
- "flush": one call captured in a CUDA graph, the replay timed by triton.testing.do_bench (L2 flushed before
  every repetition by writing a 256 MB buffer, CUDA events, median). Every row then carries a ~5 us floor
  (the flush's write-back and one graph launch), which caps the ratio of a fast kernel to a slower one.

Weights are passed as a pytree (tensor, tuple/list/dict of them, or an nn.Module holding them) and the call
takes that pytree; "rotate" clones it into the copies (tensors cloned, in modules too, anything else shared), "flush" passes the original. `time_ms(fn)` is the flush method on a zero-argument call (the name the
earlier probe scripts use).
"""

from __future__ import annotations

import copy
import functools
import math
import statistics
import time
from typing import Any, Callable

import torch

from compress.errors import CompressError

METHODS = ("rotate", "flush")
DEFAULT_METHOD = "rotate"
MIN_CALLS = 120
L2_MULTIPLE = 2.5
REPS = 15
MAX_GRAPH_MS = 25.0
_H100_L2 = 50 * 2**20  # used only when the device does not report its L2 size

METHOD_TEXT = {
    "rotate": ("decode-shaped: one CUDA graph replays the call >= {calls} times back to back, each call on its own "
               "copy of the layer's weights (copies >= {mult}x the {l2} MB L2, so weights come from DRAM), no flush "
               "and no launch gaps between calls; per call = median of {reps} replays (CUDA events) / calls"),
    "flush": ("one call captured in a CUDA graph, its replay timed by triton.testing.do_bench: L2 flushed before "
              "every repetition, CUDA events, median (every row carries the flush's ~5 us floor)"),
}


def check_method(method: str) -> str:
    if method not in METHODS:
        raise CompressError(f"unknown timing method {method!r}; choose one of {list(METHODS)}")
    return method


def method_description(method: str, device: torch.device | str = "cuda") -> str:
    """One sentence for report headers: how the rows were timed."""
    return METHOD_TEXT[check_method(method)].format(calls=MIN_CALLS, mult=L2_MULTIPLE, reps=REPS,
                                                    l2=round(l2_bytes(device) / 2**20))


def l2_bytes(device: torch.device | str = "cuda") -> int:
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return _H100_L2
    return int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or _H100_L2)


# ------------------------------------------------------------------------------------------------ weight pytrees
def _tensors(obj: Any, seen: set | None = None) -> list[torch.Tensor]:
    """Every tensor an object holds (each storage counted once)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = obj.untyped_storage().data_ptr() if obj.device.type != "meta" else id(obj)
        if key in seen:
            return []
        seen.add(key)
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v, seen)]
    if isinstance(obj, torch.nn.Module):
        out = [t for t in list(obj.parameters()) + list(obj.buffers()) for t in _tensors(t, seen)]
        return out + [t for v in vars(obj).values() if isinstance(v, (torch.Tensor, dict, list, tuple))
                      for t in _tensors(v, seen)]
    return []


def weight_bytes(weights: Any) -> int:
    """Bytes of the distinct tensors in a weight pytree."""
    return sum(t.numel() * t.element_size() for t in _tensors(weights))


def clone_weights(weights: Any) -> Any:
    """A copy of the pytree with fresh storage for every tensor (modules copied with their tensors cloned, other
    leaves shared)."""
    if isinstance(weights, torch.Tensor):
        return weights.clone()
    if isinstance(weights, dict):
        return {k: clone_weights(v) for k, v in weights.items()}
    if isinstance(weights, tuple):
        return tuple(clone_weights(v) for v in weights)
    if isinstance(weights, list):
        return [clone_weights(v) for v in weights]
    if isinstance(weights, torch.nn.Module):
        return _clone_module(weights)
    return weights


def _clone_module(mod: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of the module with every tensor it holds cloned (registered or plain attributes,
    submodules too); everything else is shared -- a peer's layer may hold compiled kernels or config objects
    that a deepcopy would duplicate or refuse."""
    new = copy.copy(mod)  # a new instance with a new __dict__ whose values are the original's
    for name, value in vars(mod).items():
        if name == "_parameters":
            new._parameters = {k: None if p is None else torch.nn.Parameter(p.detach().clone(), p.requires_grad)
                               for k, p in value.items()}
        elif name == "_buffers":
            new._buffers = {k: None if b is None else b.clone() for k, b in value.items()}
        elif name == "_modules":
            new._modules = {k: None if m is None else _clone_module(m) for k, m in value.items()}
        elif isinstance(value, (torch.Tensor, list, tuple, dict)) and _tensors(value):
            new.__dict__[name] = clone_weights(value)
    return new


def copies_needed(nbytes: int, l2: int, multiple: float = L2_MULTIPLE) -> int:
    """How many weight sets hold >= multiple x L2 together (at least 2, so no call re-reads the last one's)."""
    return max(2, math.ceil(multiple * l2 / max(1, nbytes)))


def weight_copies(weights: Any, device: torch.device | str = "cuda") -> list:
    """[weights, clone, clone, ...] holding >= L2_MULTIPLE x the L2 together."""
    n = copies_needed(weight_bytes(weights), l2_bytes(device))
    return [weights] + [clone_weights(weights) for _ in range(n - 1)]


# ------------------------------------------------------------------------------------------------ timing
def graph_us(calls: list[Callable[[], Any]], min_calls: int = MIN_CALLS, reps: int = REPS,
             max_graph_ms: float = MAX_GRAPH_MS) -> float:
    """Median per-call microseconds of one CUDA graph that runs `calls` in order, repeated to >= min_calls
    calls, or to fewer (never under one pass over `calls`) where the graph would run longer than max_graph_ms:
    a call that long amortises the graph's launch by itself."""
    for c in calls:  # eager warm-up outside the capture: compiles, autotuning, workspaces, plans
        c()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for c in calls:  # an upper bound of the pass's device time (eager: launch gaps included)
        c()
    b.record()
    torch.cuda.synchronize()
    pass_ms = max(a.elapsed_time(b), 1e-3)
    rounds = max(1, min(-(-min_calls // len(calls)), math.ceil(max_graph_ms / pass_ms)))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            for c in calls:
                c()
    g.replay()  # first replays upload the graph and touch every buffer
    g.replay()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    ms = statistics.median(a.elapsed_time(b) for a, b in events)
    del g
    return 1000.0 * ms / (rounds * len(calls))


def flush_ms(fn: Callable[[], Any], warmup_ms: int = 10, rep_ms: int = 40, graph: bool = True) -> float:
    """Median milliseconds of fn() by triton.testing.do_bench (warm-up, L2 flush before each rep, CUDA events).

    With graph=True fn is captured once in a CUDA graph and the replay is timed: decode-sized layers run for
    5-50 us, less than the Python launch path of an eager call, so eager timing would measure the host."""
    import triton

    if graph:
        fn()  # compile and warm up outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        fn = g.replay
    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


time_ms = flush_ms  # the name earlier probe scripts import (kernels/vptq_probe.py, bench/results/h100/kernels/*.py)


def call_ms(fn: Callable[[Any], Any], weights: Any = None, method: str = DEFAULT_METHOD,
            min_calls: int = MIN_CALLS) -> float:
    """Per-call milliseconds of fn(weights) by `method` (module docstring). weights None: fn(None) is repeated
    as it is (for calls whose operands are all far larger than the L2, e.g. the copy bandwidth)."""
    check_method(method)
    if method == "flush":
        return flush_ms(lambda: fn(weights))
    sets = [weights] if weights is None else weight_copies(weights)
    try:
        return graph_us([lambda w=w: fn(w) for w in sets], min_calls=min_calls) / 1000.0
    finally:
        del sets


def checked_call_us(fn: Callable[[Any], Any], weights: Any, want: torch.Tensor, tol: float = 2e-3) -> dict:
    """{"us", "err", "same"} of fn(weights) for a sweep: checked first against `want` (relative error, output block
    poisoned with NaN just before, so a kernel that leaves some of it unwritten fails) and for the same bytes on a
    second call; timed by `call_ms` only if both hold (else "us" is inf). A call that raises is reported, not fatal."""
    from kernels.cases import rel_err

    poison = torch.full_like(want, float("nan"))
    del poison  # the caching allocator hands this NaN block to the call's output next
    try:
        out = fn(weights)
        err, same = rel_err(out, want), bool(torch.equal(out, fn(weights)))
        us = 1000 * call_ms(fn, weights) if err < tol and same else float("inf")
        return {"us": us, "err": err, "same": same}
    except Exception as e:
        return {"us": float("inf"), "err": float("inf"), "same": False, "error": str(e)[:200]}


def keep_busy(fn: Callable[[], Any], seconds: float = 0.5) -> None:
    """Run fn() back to back (synchronized) for `seconds`, so that the GPU's clocks leave their idle state before a
    timing (a copy timed right after a cold start read 2.4 TB/s on an H100, ~3.0 after this)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()
        torch.cuda.synchronize()


def copy_bandwidth_gbs(device: torch.device | str = "cuda", gib: float = 2.0) -> float:
    """Device-to-device copy bandwidth, (bytes read + bytes written) / time, GB/s: `gib` GiB copies launched one at a
    time after `keep_busy` copies, median of 30 CUDA-event timings. The kernel tables' "% copy BW" and the end-to-end
    bound both divide by it.

    Not inside a CUDA graph: a captured copy_ becomes a graph memcpy node, which on session 26's H200 ran at 2711-2718
    GB/s against 4194 for the same copy launched eagerly (bench/results/h200/kernels_s26/call2/copy.log), so the
    kernel table, which timed its copy that way, listed GEMVs at 151% of the copy bandwidth. On the H100 the graph
    copy read ~2440 GB/s in the tables, the eager one ~3.0 TB/s."""
    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.float16, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    keep_busy(functools.partial(dst.copy_, src))
    times = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 2 / statistics.median(times) / 1e9


def device_description() -> dict:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_mib": round(l2_bytes("cuda") / 2**20),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }
