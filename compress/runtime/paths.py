"""Per-M dispatch to the fastest way of computing a layer, measured once on the GPU.

A compressed layer can often be computed several ways with the same math: its own kernel, "dequantize
into a temporary, then cuBLAS", torch._int_mm on int8 operands, or (dense layers at M = 1) the
runtime's GEMV. Which is fastest depends on the GPU, the layer shape and M (tokens per call), and the
kernels keep changing, so fixed thresholds go stale (last session's "dequantize at >= 512 tokens" left
2:4 batch decode 5x slower than fp16). `PathTable.run` times every candidate the first time it sees
(layer kind, N, K, M, dtype) and keeps the winner for that key.

Timing: each candidate once to compile/warm up, then CUDA-event timings of single calls, each after
the L2 cache is overwritten and the GPU is kept busy (so the host's launch cost stays out), taken in
rounds over the candidates, median per candidate.
A preferred candidate (`preferred_paths`) wins whenever its time is within its tolerance of the fastest. A launch
config variant of a kernel (`name#config`) wins over the kernel's default config only by more than VARIANT_MARGIN.
A choices file (COMPRESS_PATH_CHOICES, written by `compress bench e2e --save-paths`) pins the paths it lists.
Every layer of one shape shares the decision. During CUDA-graph capture nothing is measured (a key
not seen before takes the first candidate); on a CPU the first candidate always runs, unless
`measure_on_cpu` is set (tests: the same selection logic, timed with the host clock, kernels in
Triton's interpreter).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from compress.errors import CompressError

Candidate = tuple[str, Callable[[], torch.Tensor]]

_FLUSH_BYTES = 256 * 2**20  # > the H100's 50 MB L2 several times over
# GPU cycles the stream spins before each timed call, so the call is enqueued before the GPU reaches it and the host's
# launch cost stays out of the timing. 200k cycles (~0.1 ms) was too short on the lent H100 machine (session 9, call 3):
# the W4A16 CUDA GEMV's Python launch path outlasted it and timed 72-130 us for 10-25 us kernels, so the table took the
# Triton kernel for 8B gate/up and dequantize + cuBLAS for o_proj, and the W4A16 decode TPOT went 2.42 -> 3.42 ms.
_SPIN_CYCLES = 2_000_000  # ~1 ms at 2 GHz
MATCH_TOL = 1e-2
SAMPLES = 5  # timed calls per candidate on the GPU (median)


def _max_rel(a, b) -> float:
    """Largest relative L2 difference between two outputs (tensors or tuples of tensors)."""
    if isinstance(a, (tuple, list)):
        return max(_max_rel(x, y) for x, y in zip(a, b))
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def family(names, name: str) -> list[str]:
    """`name` and its variants among `names`: a candidate offered under several launch configs is named `name` for the
    first and `name#config` for the others (formats_compress: the WS GEMV on a shape without a measured config).
    A preferred or forced path names its whole family."""
    return [n for n in names if n == name or n.startswith(name + "#")]


# A variant (`name#config`) is chosen over its family's head (`name`, the kernel's default config) only when its single
# call is faster by more than this. Why: inside the decode step's CUDA graph the launch configs of one kernel rank
# differently from their single calls. Session 34 (H200, synthetic Llama-3-8B W4A16, the WS GEMV's measured configs
# dropped, bench/results/h200/kernels_s34/README.md): taking each shape's fastest single call decoded at 2.006 ms TPOT
# against 1.810 with the measured configs. The variants that won single calls by 1.5-10.9% over the default (8B q/o,
# fused q/k/v, fused gate_up) were 2-5% slower in the graph (session 33's in-graph sweep); the one that won by 14.3%
# (8B down, config 9) was the fastest there too. Where a config matters most, the 70B fused gate_up, config 9 decodes
# 12% faster than the default (session 33) and wins its single calls by 38% (session 34, call 3), so it is still served.
VARIANT_MARGIN = 0.125


def family_pick(names, times: dict, name: str) -> str | None:
    """The member of `name`'s family (among `names`) to serve by single-call times: its fastest, or the head where the
    head is within VARIANT_MARGIN of it (None: no member in `names`)."""
    fam = family(names, name)
    if not fam:
        return None
    fastest = min(fam, key=times.get)
    head = fastest.split("#", 1)[0]
    return head if head in fam and times[head] <= times[fastest] * (1 + VARIANT_MARGIN) else fastest


def forced_paths() -> list[str]:
    """COMPRESS_PATH_FORCE: candidate names (comma list) chosen wherever offered, if they run and match the first
    path, whatever their single-call time. For same-process A/B runs of a decode step, where a path's time inside
    the CUDA graph (launches overlapping under PDL) can rank differently from its cold single call (session 7's
    folds, session 11's)."""
    return [n.strip() for n in os.environ.get("COMPRESS_PATH_FORCE", "").split(",") if n.strip()]


# Candidates preferred within a tolerance of the fastest single call (name -> tolerance): where a path's time inside a
# decode step's CUDA graph ranks it differently from its cold single call. Session 32 (H200, synthetic Llama-3-8B
# W4A16, batch 1, one process, bench/results/h200/kernels_s32/README.md): every int4 layer on the warp-specialized
# one-token GEMV decodes at 1.805 ms TPOT (twice), the path table's own mix (it at q/k/v and o, the CUDA-core GEMV at
# gate/up, the tensor-core GEMV at down; their single calls within 6% of each other) at 1.904 ms (three times), the
# tensor-core GEMV everywhere 1.901, the CUDA-core one 1.991. The kernel table's back-to-back graph timing ranks it
# first on 5 of the 8 one-token layer shapes too. Per GPU (a key its name holds), as the kernels' measured config
# tables: only the H200 has been measured; elsewhere no path is preferred. COMPRESS_PATH_PREFER: "name:tolerance,..."
# overrides it on any GPU ("" or "0": none).
PREFER_BY_GPU = {"H200": "cuda_ws_gemv:0.10"}


def preferred_paths(gpu: str | None = None) -> dict[str, float]:
    """Preferred candidates (name -> tolerance) on the GPU named `gpu` (torch.cuda.get_device_name; None: no GPU)."""
    raw = os.environ.get("COMPRESS_PATH_PREFER")
    if raw is None and gpu is not None:
        from kernels.cuda_build import gpu_key  # the kernels' own lookup of their per-GPU tables

        raw = PREFER_BY_GPU.get(gpu_key(PREFER_BY_GPU, gpu), "")
    out = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if item in ("", "0"):
            continue
        name, _, tol = item.partition(":")
        try:
            t = float(tol)
        except ValueError:
            t = -1.0
        if not name or not 0 <= t <= 1:
            raise CompressError(f"COMPRESS_PATH_PREFER={raw!r}: {item!r} is not name:tolerance with a tolerance in 0..1 "
                                "(e.g. cuda_ws_gemv:0.1); use \"\" for none")
        out[name] = t
    return out


def gpu_of(device: torch.device) -> str | None:
    """The GPU name the preferences and choices files are keyed by (torch.cuda.get_device_name; None off CUDA)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


CHOICES_FORMAT = "compress.path_choices/1"


def _key_text(key: tuple) -> tuple[str, ...]:
    """A table key as the choices file writes it (its parts as text)."""
    return tuple(str(k) for k in key)


_saved: dict[tuple[str, str | None], dict[tuple[str, ...], str]] = {}


def saved_choices(gpu: str | None) -> dict[tuple[str, ...], str]:
    """COMPRESS_PATH_CHOICES's choices ({key text: path name}; {} when unset), checked against the GPU named `gpu`."""
    raw = os.environ.get("COMPRESS_PATH_CHOICES", "")
    if not raw:
        return {}
    if (raw, gpu) in _saved:
        return _saved[(raw, gpu)]
    fix = "write it with `compress bench e2e ... --tune-paths --save-paths FILE`, or unset COMPRESS_PATH_CHOICES"
    try:
        doc = json.loads(Path(raw).read_text())
    except OSError as e:
        raise CompressError(f"COMPRESS_PATH_CHOICES={raw}: cannot read it ({e.strerror}); {fix}") from None
    except ValueError:
        raise CompressError(f"COMPRESS_PATH_CHOICES={raw}: not JSON; {fix}") from None
    if not isinstance(doc, dict) or doc.get("format") != CHOICES_FORMAT or not isinstance(doc.get("choices"), list):
        raise CompressError(f"COMPRESS_PATH_CHOICES={raw}: not a path choices file ({CHOICES_FORMAT}); {fix}")
    if doc.get("gpu") != gpu:
        raise CompressError(f"COMPRESS_PATH_CHOICES={raw}: chosen on {doc.get('gpu') or 'a CPU'}, this is "
                            f"{gpu or 'a CPU'}; paths rank differently per GPU, so {fix} here")
    try:
        out = {_key_text(c["key"]): str(c["chosen"]) for c in doc["choices"]}
    except (KeyError, TypeError):
        raise CompressError(f"COMPRESS_PATH_CHOICES={raw}: an entry lacks \"key\" or \"chosen\"; {fix}") from None
    _saved[(raw, gpu)] = out
    return out


class PathTable:
    def __init__(self):
        self.choice: dict[tuple, str] = {}
        self.timings: dict[tuple, dict[str, float]] = {}
        self._flush: dict[torch.device, torch.Tensor] = {}
        self.measure_on_cpu = False
        self.cpu_samples = 1  # host-clock samples per candidate when measuring on a CPU (tests)
        self._touched: set[tuple] | None = None  # keys that `run` served with a choice to make, while recording

    @contextmanager
    def recording(self) -> Iterator[set[tuple]]:
        """The keys with more than one candidate that `run` (or `chosen`) serves inside the block (e.g. a decode
        step's)."""
        self._touched = touched = set()
        try:
            yield touched
        finally:
            self._touched = None

    def enabled(self, device: torch.device) -> bool:
        """Whether callers should offer their alternative paths on `device` (GPU; CPU only in tests)."""
        return device.type == "cuda" or self.measure_on_cpu

    def chosen(self, key: tuple) -> str | None:
        """The path chosen for `key` (None before it is measured), recorded while `recording`: what `run` looks up, and
        what callers that run the chosen path without listing the candidates again ask (QuantLinear.forward)."""
        if self._touched is not None:
            self._touched.add(key)
        return self.choice.get(key)

    def run(self, key: tuple, candidates: Sequence[Candidate], device: torch.device) -> torch.Tensor:
        """The output of the chosen candidate for `key` (measuring the candidates first if needed)."""
        if len(candidates) == 1:
            return candidates[0][1]()
        name = self.chosen(key)
        if name is None:
            # The capture check, the timing events and the synchronizes are the current device's: make it the
            # candidates' (a model on another GPU than the current one, compress.runtime.load(device="cuda:1")).
            with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
                if not self.enabled(device) or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
                    return candidates[0][1]()
                name = self._measure(key, candidates, device)
        for n, fn in candidates:
            if n == name:
                return fn()
        return candidates[0][1]()  # the candidate list changed since (e.g. another M bucket's rules)

    def _measure(self, key, candidates, device) -> str:
        times = {}
        runnable = []
        first = None
        for name, fn in candidates:
            try:
                out = fn()  # compile / autotune / allocate
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            except Exception as e:  # a path that cannot run this shape is simply not chosen
                times[name] = float("inf")
                self.timings.setdefault(key, {})[f"{name} (failed)"] = f"{type(e).__name__}: {str(e)[:80]}"
                continue
            # Every path must compute the first one's function: a fast path with wrong output is never
            # chosen (the paths differ only in summation order and rounding points: < 1e-2 relative).
            if first is None:
                first = out
            else:
                err = _max_rel(out, first)
                if not err < MATCH_TOL:
                    times[name] = float("inf")
                    self.timings.setdefault(key, {})[f"{name} (mismatch)"] = f"rel err {err:.2e} vs {candidates[0][0]}"
                    continue
            runnable.append((name, fn))
        # Samples in rounds over the candidates, not one candidate's samples back to back: a slow spell of the GPU
        # or host then lands in one round of every candidate rather than in all samples of one. Session 14's kernel
        # table once timed the W8A8 kernel at 2161 us here (7.6 us by its own timing) and took torch._int_mm for
        # 8B k/v at 32 tokens; it did not recur in a probe of 140 samples (bench/results/h100/kernels_s14/README.md).
        samples: dict[str, list[float]] = {name: [] for name, _ in runnable}
        for _ in range(SAMPLES if device.type == "cuda" else self.cpu_samples):
            for name, fn in runnable:
                if samples[name] and samples[name][-1] > 5.0:  # ms: slow enough that one sample says it
                    continue
                samples[name].append(self._time_once(fn, device))
        for name, got in samples.items():
            times[name] = sorted(got)[len(got) // 2]
        best = min(times, key=times.get)
        gpu = gpu_of(device)
        ran = [n for n, t in times.items() if t != float("inf")]
        if "#" in best:  # a launch config variant: its family's head unless it is faster by more than VARIANT_MARGIN
            best = family_pick(ran, times, best.split("#", 1)[0])
        for pref, tol in preferred_paths(gpu).items():
            name = family_pick(ran, times, pref)
            if name is not None and name != best and times[name] <= times[best] * (1 + tol):
                self.timings.setdefault(key, {})[f"{name} (preferred)"] = f"within {tol:.0%} of {best}"
                best = name
                break
        saved = saved_choices(gpu).get(_key_text(key))
        if saved is not None and saved != best:  # pinned by a choices file, if it ran and matched the first path
            self.timings.setdefault(key, {})[f"{saved} (saved)"] = \
                "COMPRESS_PATH_CHOICES" if saved in ran else "COMPRESS_PATH_CHOICES: not offered here, or it failed"
            best = saved if saved in ran else best
        forced = [n for n in (family_pick(ran, times, f) for f in forced_paths()) if n is not None]
        if forced:  # an A/B run asked for it (it ran and matched the first path)
            best = forced[0]
        if times[best] == float("inf"):
            best = candidates[0][0]
        self.choice[key] = best
        self.timings.setdefault(key, {}).update(
            {n: round(t * 1e3, 2) for n, t in times.items() if t != float("inf")})  # us
        return best

    def _time_once(self, fn, device) -> float:
        """Milliseconds of one call."""
        if device.type != "cuda":
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        buf = self._flush.get(device)
        if buf is None:
            buf = self._flush[device] = torch.empty(_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        buf.fill_(1.0)  # evicts the weights from L2, as between two layers of a real decode step
        torch.cuda._sleep(_SPIN_CYCLES)  # the host enqueues the call before the GPU reaches it
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def report(self) -> list[dict]:
        """Every measured key: its choice and the candidates' times (microseconds)."""
        return [{"layer": k[0], "N": k[1], "K": k[2], "M": k[3], "chosen": self.choice.get(k), "us": t}
                for k, t in sorted(self.timings.items(), key=lambda kv: tuple(map(str, kv[0])))]

    def save(self, path: Path | str, gpu: str | None) -> int:
        """Write every choice the table holds as a choices file for COMPRESS_PATH_CHOICES (chosen on the GPU named
        `gpu`); returns how many. Written whole to a sibling first, then renamed: never half a file."""
        path = Path(path)
        doc = {"format": CHOICES_FORMAT, "gpu": gpu,
               "choices": [{"key": list(_key_text(k)), "chosen": v}
                           for k, v in sorted(self.choice.items(), key=lambda kv: _key_text(kv[0]))]}
        tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
        try:
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return len(doc["choices"])

    def clear(self) -> None:
        self.choice.clear()
        self.timings.clear()
        self._flush.clear()


TABLE = PathTable()  # one per process: decisions depend only on shapes and the device
