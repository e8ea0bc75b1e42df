"""Session 4, W8A8 batch-1 decode: before vs now in one process, on one synthetic Llama-3-8B W8A8 model.

Usage (repository root, GPU): python3 bench/results/h100/e2e/session4_w8a8/ab_e2e.py OUT.json [RUNS]

Builds the model once (`--synthetic llama-3-8b --formats w8a8` of `compress bench e2e`), measures the copy
bandwidth once, then for each variant: clears the path table, points `compress.runtime.decode_kernels` at
that variant's module (the runtime imports it inside its functions, so the next Generator uses it), and
runs the e2e decode_bound workload (batch 1, 256 + 512 tokens, CUDA graphs, RUNS timed runs) and the
profile of one eager decode step -- the same functions `compress bench e2e` calls.
Variants: "before" = decode_kernels_before.py (commit 3bcf560's file), "call1_pdl" = decode_kernels_call1.py
(the code of device call 1, with PDL), "now" (the working tree's file) with COMPRESS_DECODE_PDL=1/0.
Each variant also generates 64 tokens with graphs; they must equal the first variant's.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

import compress.runtime
import compress.runtime.decode_kernels as now_mod
from compress.bench.e2e_measure import copy_bandwidth_gbs, decode_weight_bytes, measure_workload, prompt_ids
from compress.bench.e2e_profile import profile_steps
from compress.bench.e2e_synthetic import build_synthetic
from compress.bench.e2e_workloads import WORKLOADS
from compress.runtime.generate import Generator
from compress.runtime.paths import TABLE

HERE = Path(__file__).resolve().parent
NAME = "compress.runtime.decode_kernels"


def _module(file: str):
    spec = importlib.util.spec_from_file_location(NAME, HERE / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def use(mod) -> None:
    sys.modules[NAME] = mod
    compress.runtime.decode_kernels = mod


def main() -> None:
    out = Path(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    order = (sys.argv[3] if len(sys.argv) > 3 else "before,now_pdl,now_nopdl").split(",")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: a script check (AB_ARCH tiny)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    bw = copy_bandwidth_gbs(dev)
    model = build_synthetic(os.environ.get("AB_ARCH", "llama-3-8b"), "w8a8", dev, seed=0)
    wbytes = decode_weight_bytes(model)
    bound = wbytes / (bw * 1e9) * 1e3
    doc = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "copy_bw_gbs": bw, "weight_bytes": wbytes, "bound_ms": bound,
           "runs": runs, "variants": {}}
    print(f"copy bandwidth {bw:.0f} GB/s; {wbytes / 1e9:.3f} GB per step -> bound {bound:.3f} ms", flush=True)
    before = _module("decode_kernels_before.py")
    call1 = _module("decode_kernels_call1.py")
    wl = WORKLOADS[os.environ.get("AB_WORKLOAD", "decode_bound")]
    first_tokens = None
    for name in order:
        mod, pdl = {"before": (before, "0"), "call1_pdl": (call1, "1"), "now_pdl": (now_mod, "1"),
                    "now_nopdl": (now_mod, "0")}[name]
        os.environ["COMPRESS_DECODE_PDL"] = pdl
        use(mod)
        TABLE.clear()
        try:
            res = measure_workload(model, f"w8a8 {name}", wl, runs, "auto", True, 0, print)
            s = res.stats()
            # The greedy tokens of a graph-replayed generation, against the first variant's (same weights and
            # prompt: the variants differ only in launch order and tiling, so the tokens must be equal).
            gen = Generator(model, wl.batch, wl.input_len, 64, engine="auto", cuda_graphs=True)
            ids = prompt_ids(model.config.vocab_size, wl.batch, wl.input_len, 0, dev)
            gen.warmup(ids)
            tokens = gen.run(ids).tokens.cpu()
            del gen
            first_tokens = tokens if first_tokens is None else first_tokens
            prof = profile_steps(model, wl, "auto", 0)
        except Exception as e:  # one variant failing must not cost the others
            doc["variants"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"== {name}: FAILED {doc['variants'][name]['error']}", flush=True)
            out.write_text(json.dumps(doc, indent=1))
            continue
        v = {"tpot_ms": s["tpot_ms"], "ttft_ms": s["ttft_ms"], "tpot_over_bound": s["tpot_ms"]["mean"] / bound,
             "graph_tokens_match": res.graph_tokens_match,
             "tokens_equal_first_variant": bool(torch.equal(tokens, first_tokens)),
             "engine": res.engine, "graphs": res.cuda_graphs,
             "paths": TABLE.report(), "decode_profile": prof["decode"]["table"], "decode_top": prof["decode"]["top"]}
        doc["variants"][name] = v
        print(f"== {name}: TPOT {s['tpot_ms']['mean']:.3f} +- {s['tpot_ms']['std']:.3f} ms, "
              f"TPOT/bound {v['tpot_over_bound']:.3f}, graph tokens = eager: {res.graph_tokens_match}, "
              f"64 tokens = first variant's: {v['tokens_equal_first_variant']}", flush=True)
        for t in prof["decode"]["top"][:8]:
            print(f"   {t['name'][:40]:40s} {t['self_us']:9.1f} us  x{t['calls']}", flush=True)
        out.write_text(json.dumps(doc, indent=1))
        gc.collect()
        torch.cuda.empty_cache()
    use(now_mod)


if __name__ == "__main__":
    main()
