"""Greedy, fixed-length generation with a static KV cache, CUDA graphs on the GPU, and timings.

Two engines behind one interface (`reset`, `prefill(ids) -> logits`, `decode(tok) -> logits`):
- "fast": `compress.runtime.fastpath.FastLM` (Llama-family; fused layers, compiled glue); both the
  prefill and the decode step are captured as CUDA graphs.
- "hf": the transformers forward with `transformers.StaticCache` (any causal LM); the decode step is
  captured (its prefill asks the host whether the cache is empty, which a graph cannot).

`Generator.run(ids)` replays: prefill -> first token (TTFT), then output_len - 1 decode steps; tokens
are collected on the device, so nothing waits for the host until the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from compress.errors import CompressError
from compress.runtime.fastpath import FastLM, unsupported_reason
from kernels.op_dispatch import on_input_device

ENGINES = ("auto", "fast", "hf")

# One side stream per device for warming a step before its capture. A new torch.cuda.Stream per capture made cuBLAS
# allocate a new workspace for it (32 MiB on the H200), held until the process exits: `--tune-paths` re-captures the
# graphs once per trial, and 23 trials left 0.97 GB more allocated (session 33, bench/results/h200/kernels_s33).
_WARM_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _warm_stream(device: torch.device) -> torch.cuda.Stream:
    key = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
    s = _WARM_STREAMS.get(key)
    if s is None:
        s = _WARM_STREAMS[key] = torch.cuda.Stream(key)
    return s


class HFEngine:
    """transformers' own forward over a StaticCache."""

    graph_prefill = False

    def __init__(self, model: nn.Module, batch: int, max_len: int):
        from transformers import StaticCache

        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)

    def reset(self) -> None:
        self.cache.reset()

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1]

    @torch.no_grad()
    def decode(self, tok: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tok, past_key_values=self.cache, use_cache=True).logits[:, -1]


class FastEngine:
    graph_prefill = True

    def __init__(self, model: nn.Module, batch: int, max_len: int, compile_glue: bool):
        self.lm = FastLM(model, batch, max_len, fuse=True, compile_glue=compile_glue)

    def reset(self) -> None:
        self.lm.reset()

    def prefill(self, ids):
        return self.lm.prefill(ids)

    def decode(self, tok):
        return self.lm.decode(tok)


@dataclass
class RunResult:
    """One generation: seconds, and the generated tokens (B, output_len) on the CPU."""

    ttft_s: float
    latency_s: float
    tpot_s: float
    tokens: torch.Tensor = field(repr=False)


def pick_engine(model: nn.Module, engine: str) -> str:
    if engine not in ENGINES:
        raise CompressError(f"engine={engine!r} is not one of {ENGINES}")
    reason = unsupported_reason(model)
    if engine == "fast" and reason:
        raise CompressError(f"engine='fast' cannot run this model ({reason}); use --engine hf")
    if engine == "auto":
        return "hf" if reason else "fast"
    return engine


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """`logits.argmax(-1, keepdim=True)` computed in two stages: the max of every chunk of the vocabulary,
    then the argmax over the chunks. Same result, ties included (both stages keep the first maximal index).

    Why: for one row, torch's argmax over a 128k vocabulary is a single-block reduction that took 30 us of
    a ~3.5 ms decode step on an H100 (bench/results/h100/e2e/session3/glue/README.md); the chunked
    reduction spreads the first stage over hundreds of blocks."""
    v = logits.shape[-1]
    chunk = next((c for c in (1024, 512, 256, 128) if v % c == 0), None)
    if v < 8192 or chunk is None:
        return logits.argmax(-1, keepdim=True)
    best, where = logits.unflatten(-1, (v // chunk, chunk)).max(-1)  # (..., v // chunk) each
    c = best.argmax(-1, keepdim=True)
    return c * chunk + where.gather(-1, c)


class Generator:
    """Greedy generation of exactly `output_len` tokens for a fixed (batch, input_len).

    Args:
        model: a causal LM (compress.runtime.load output, or any transformers model).
        engine: "auto" (fast where supported, else hf), "fast" or "hf".
        cuda_graphs: capture prefill/decode as CUDA graphs (GPU only; ignored on CPU).
        compile_glue: torch.compile the fast engine's elementwise glue (GPU only).
    """

    def __init__(self, model: nn.Module, batch: int, input_len: int, output_len: int, engine: str = "auto",
                 cuda_graphs: bool = True, compile_glue: bool = True):
        if output_len < 1 or input_len < 1 or batch < 1:
            raise CompressError(f"batch={batch}, input_len={input_len}, output_len={output_len} must all be >= 1")
        self.model = model
        self.batch, self.input_len, self.output_len = batch, input_len, output_len
        self.device = next(model.parameters()).device
        self.on_gpu = self.device.type == "cuda"
        self.engine_name = pick_engine(model, engine)
        max_len = input_len + output_len
        if self.engine_name == "fast":
            self.engine = FastEngine(model, batch, max_len, compile_glue=compile_glue and self.on_gpu)
        else:
            self.engine = HFEngine(model, batch, max_len)
        self.cuda_graphs = cuda_graphs and self.on_gpu
        self.graph_note = "on" if self.cuda_graphs else ("off (CPU)" if not self.on_gpu else "off (asked)")
        # Device-side state shared by the eager and the captured steps.
        self.ids = torch.zeros(batch, input_len, dtype=torch.long, device=self.device)
        self.tok = torch.zeros(batch, 1, dtype=torch.long, device=self.device)
        self.tokens = torch.zeros(batch, output_len, dtype=torch.long, device=self.device)
        self.step = torch.zeros(1, dtype=torch.long, device=self.device)
        self.g_prefill = self.g_decode = None

    # ---- the two steps (eager bodies; the graphs record exactly these) -------------------------

    def _prefill_step(self) -> None:
        nxt = greedy_argmax(self.engine.prefill(self.ids))  # (B, 1)
        self.tok.copy_(nxt)
        self.step.zero_()
        self.tokens.index_copy_(1, self.step, nxt)
        self.step.add_(1)

    def _decode_step(self) -> None:
        nxt = greedy_argmax(self.engine.decode(self.tok))
        self.tok.copy_(nxt)
        self.tokens.index_copy_(1, self.step, nxt)
        self.step.add_(1)

    # ---- set-up ---------------------------------------------------------------------------------

    @on_input_device  # streams, events and graph capture are the current device's: make it the model's
    def warmup(self, ids: torch.Tensor, decode_steps: int = 3) -> None:
        """Run the steps eagerly (compiles, autotunes, allocates), then capture the CUDA graphs."""
        self.ids.copy_(ids)
        self.engine.reset()
        self._prefill_step()
        for _ in range(min(decode_steps, self.output_len - 1)):
            self._decode_step()
        if not self.cuda_graphs:
            return
        torch.cuda.synchronize()
        try:
            pool = torch.cuda.graph_pool_handle()
            if self.engine.graph_prefill:
                self.engine.reset()
                self.g_prefill = self._capture(self._prefill_step, pool)
            if self.output_len > 1:
                self.g_decode = self._capture(self._decode_step, pool)
        except Exception as e:  # a graph-unsafe op in some model: say so and measure eagerly
            self.g_prefill = self.g_decode = None
            self.graph_note = f"off (capture failed: {type(e).__name__}: {str(e).splitlines()[0][:120]})"
            torch.cuda.synchronize()
        self.engine.reset()

    def _capture(self, fn, pool) -> torch.cuda.CUDAGraph:
        # Warm the step on a side stream first (what torch.cuda.graph expects), then record it.
        s = _warm_stream(self.device)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            fn()
        return g

    # ---- measurement ----------------------------------------------------------------------------

    @on_input_device  # streams, events and graph capture are the current device's: make it the model's
    def run(self, ids: torch.Tensor) -> RunResult:
        """One timed generation from `ids` (B, input_len)."""
        if tuple(ids.shape) != (self.batch, self.input_len):
            raise CompressError(f"ids shape {tuple(ids.shape)} differs from ({self.batch}, {self.input_len})")
        self.ids.copy_(ids)
        self.engine.reset()
        prefill = self.g_prefill.replay if self.g_prefill is not None else self._prefill_step
        decode = self.g_decode.replay if self.g_decode is not None else self._decode_step
        if not self.on_gpu:
            t0 = time.perf_counter()
            prefill()
            t1 = time.perf_counter()
            for _ in range(self.output_len - 1):
                decode()
            t2 = time.perf_counter()
            ttft, latency = t1 - t0, t2 - t0
        else:
            start, first, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            torch.cuda.synchronize()
            start.record()
            prefill()
            first.record()
            for _ in range(self.output_len - 1):
                decode()
            end.record()
            end.synchronize()
            ttft, latency = start.elapsed_time(first) / 1e3, start.elapsed_time(end) / 1e3
        tpot = (latency - ttft) / (self.output_len - 1) if self.output_len > 1 else 0.0
        return RunResult(ttft, latency, tpot, self.tokens.cpu())

    @on_input_device  # streams, events and graph capture are the current device's: make it the model's
    def eager_tokens(self, ids: torch.Tensor, limit: int | None = None) -> torch.Tensor:
        """The first `limit` tokens (default all) of the same generation without graphs, to check that
        the graphs replay the right computation."""
        n = self.output_len if limit is None else max(1, min(limit, self.output_len))
        self.ids.copy_(ids)
        self.engine.reset()
        self._prefill_step()
        for _ in range(n - 1):
            self._decode_step()
        return self.tokens[:, :n].cpu()
