"""Measurements of one model under the e2e workloads: timings per run, peak memory, the decode bound.

The decode bound is the time a batch-1 decode step needs just to read the weights once:
weight bytes (every Linear's stored tensors, lm_head and norms; not the embedding table, of which a
step reads one row per sequence) / the device's copy bandwidth measured in the same invocation.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn

from compress.bench.e2e_workloads import Workload
from compress.bench.kernel_timing import copy_bandwidth_gbs as gpu_copy_bandwidth_gbs
from compress.runtime.fastpath import FastLM, unsupported_reason
from compress.runtime.generate import Generator
from compress.runtime.loader import reference_backend

METRICS = ("latency_s", "ttft_ms", "tpot_ms", "output_tps", "overall_tps", "input_tps", "peak_mem_gb")


@dataclass
class RunMetrics:
    latency_s: float
    ttft_ms: float
    tpot_ms: float
    output_tps: float
    overall_tps: float
    input_tps: float
    peak_mem_gb: float | None


@dataclass
class WorkloadResult:
    model: str
    workload: str
    batch: int
    input_len: int
    output_len: int
    runs: list[RunMetrics] = field(default_factory=list)
    engine: str = ""
    cuda_graphs: str = ""
    graph_tokens_match: bool | None = None
    skipped: str | None = None
    tuned: list[dict] = field(default_factory=list)  # --tune-paths: compress.runtime.graph_tune's entries

    def stats(self) -> dict[str, dict[str, float]]:
        out = {}
        for m in METRICS:
            vals = [getattr(r, m) for r in self.runs if getattr(r, m) is not None]
            if vals:
                mean = sum(vals) / len(vals)
                std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
                out[m] = {"mean": mean, "std": std}
        return out

    def to_json(self) -> dict:
        d = asdict(self)
        d["stats"] = self.stats()
        return d


def decode_weight_bytes(model: nn.Module) -> int:
    """Bytes a decode step must read at least: every parameter/buffer storage once, except the input
    embedding table (unless lm_head shares it) and non-persistent buffers (rotary frequencies)."""
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    head_w = getattr(head, "weight", None)
    skip = set()
    if head_w is None or embed.untyped_storage().data_ptr() != head_w.untyped_storage().data_ptr():
        skip.add(embed.untyped_storage().data_ptr())
    nonpersistent = {id(b) for m in model.modules() for n, b in m._buffers.items()
                     if b is not None and n in m._non_persistent_buffers_set}
    seen: dict[int, int] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in nonpersistent:
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def copy_bandwidth_gbs(device: torch.device) -> float:
    """Device-to-device copy bandwidth, (bytes read + bytes written) / time, GB/s: on a GPU the kernel tables'
    measurement (compress.bench.kernel_timing.copy_bandwidth_gbs: 2 GiB copies after 0.5 s of copying, median of 30
    CUDA-event timings); on the CPU a 64 MiB copy."""
    if device.type == "cuda":
        return gpu_copy_bandwidth_gbs(device)
    src = torch.randn(64 * 2**20 // 4)  # 64 MiB: beyond the caches of the CI machine
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best / 1e9


def prompt_ids(vocab: int, batch: int, length: int, seed: int, device: torch.device) -> torch.Tensor:
    """Seeded random prompt tokens (generation is fixed-length, so their content does not matter)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + batch * 7919 + length)
    return torch.randint(0, vocab, (batch, length), generator=g).to(device)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@torch.no_grad()
def layer_checks(model: nn.Module, seed: int) -> dict:
    """Each compressed Linear of the first decoder layer on the same random activations (rms 1), kernel
    vs reference, for M = 1 and 16 tokens: the kernels' own error, free of the amplification a deep
    random network applies to it. Returns the worst relative error per M, and per path (every way
    `kernel_paths` offers, not only the one the path table picks)."""
    from compress.runtime.qlinear import QuantLinear

    layer0 = model.model.layers[0]
    mods = [m for m in layer0.modules() if isinstance(m, QuantLinear)]
    out: dict = {}
    paths: dict[str, float] = {}
    g = torch.Generator().manual_seed(seed + 2)
    for m_tokens in (1, 16):
        worst = 0.0
        for mod in mods:
            x = torch.randn(m_tokens, mod.in_features, generator=g).to(next(mod.buffers()).device, mod.dtype)
            y = mod(x)
            with reference_backend(mod):
                r = mod(x)
            worst = max(worst, _rel(y, r))
            if mod.backend == "kernel":
                for name, fn in mod.kernel_paths(x):
                    paths[name] = max(paths.get(name, 0.0), _rel(fn(), r))
        out[f"M={m_tokens}"] = worst
    if paths:
        out["paths"] = paths
    return out


@torch.no_grad()
def logit_checks(model: nn.Module, seed: int, length: int = 16) -> dict:
    """Last-position logits of one short prompt, three ways: transformers' forward with our kernels,
    the same forward with every compressed layer on its plain-torch reference, and the fast engine.
    Reported as relative L2 errors (the tolerance is stated beside them in the report)."""
    device = next(model.parameters()).device
    ids = prompt_ids(model.config.vocab_size, 1, length, seed + 1, device)
    kernel = model(ids).logits[:, -1]
    with reference_backend(model):
        ref = model(ids).logits[:, -1]
    out = {"prompt_tokens": length, "kernel_vs_reference": _rel(kernel, ref),
           "argmax_agree": bool(kernel.argmax(-1).eq(ref.argmax(-1)).all()),
           "layer_kernel_vs_reference": layer_checks(model, seed)}
    if unsupported_reason(model) is None:
        fast = FastLM(model, 1, length + 1).prefill(ids)
        out["fast_vs_transformers"] = _rel(fast, kernel)
    return out


def measure_workload(model: nn.Module, label: str, wl: Workload, runs: int, engine: str, cuda_graphs: bool,
                     seed: int, log=print, tune_paths: bool = False) -> WorkloadResult:
    """tune_paths: before the timed runs, choose the decode step's paths by timing the step itself
    (compress.runtime.graph_tune)."""
    res = WorkloadResult(label, wl.name, wl.batch, wl.input_len, wl.output_len)
    max_pos = getattr(model.config, "max_position_embeddings", None)
    if max_pos is not None and wl.input_len + wl.output_len > max_pos:
        res.skipped = f"needs {wl.input_len + wl.output_len} positions, the model has {max_pos}"
        return res
    device = next(model.parameters()).device
    ids = prompt_ids(model.config.vocab_size, wl.batch, wl.input_len, seed, device)
    gen = None
    try:
        gen = Generator(model, wl.batch, wl.input_len, wl.output_len, engine=engine, cuda_graphs=cuda_graphs)
        res.engine = gen.engine_name
        gen.warmup(ids)
        if tune_paths:
            from compress.runtime.graph_tune import tune_decode_paths

            res.tuned = tune_decode_paths(gen, ids, log=log)
        res.cuda_graphs = gen.graph_note
        for r in range(runs):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            out = gen.run(ids)
            peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
            if r == 0 and gen.g_decode is not None:
                # The graphs must replay the eager computation: same greedy tokens (first 16; eager
                # steps are slow, and a wrong replay shows at once).
                eager = gen.eager_tokens(ids, limit=16)
                res.graph_tokens_match = bool(torch.equal(eager, out.tokens[:, : eager.shape[1]]))
            n_out, n_in = wl.batch * wl.output_len, wl.batch * wl.input_len
            res.runs.append(RunMetrics(
                latency_s=out.latency_s, ttft_ms=out.ttft_s * 1e3, tpot_ms=out.tpot_s * 1e3,
                output_tps=n_out / out.latency_s, overall_tps=(n_out + n_in) / out.latency_s,
                input_tps=n_in / out.ttft_s, peak_mem_gb=peak))
        s = res.stats()
        log(f"  {label} {wl.name}: latency {s['latency_s']['mean']:.3f} s, TTFT {s['ttft_ms']['mean']:.2f} ms, "
            f"TPOT {s['tpot_ms']['mean']:.3f} ms, {s['output_tps']['mean']:.1f} tok/s out "
            f"[{res.engine}, graphs {res.cuda_graphs}]")
    except torch.cuda.OutOfMemoryError:
        res.skipped = "out of GPU memory"
        res.runs = []
        log(f"  {label} {wl.name}: skipped (out of GPU memory)")
    finally:
        del gen
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return res
