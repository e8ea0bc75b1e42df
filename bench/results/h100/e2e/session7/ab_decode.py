"""Same-process A/B of the W4A16 decode-step folds (COMPRESS_DECODE_W4_FUSE, compress/runtime/fastpath.py) on the
synthetic Llama-3-8B, batch 1, decode_bound shape (256 in, 512 out): one model, one Generator per arm (each captures
its own CUDA graphs), arms interleaved, 3 timed runs each. Prints one ARM line per arm, the path table's timings of
the new keys, the bound of the same process (decode weight bytes / copy bandwidth, as `compress bench e2e`), and a
kernel table of three CUDA-graph decode replays of the last arm.

Usage (repository root, GPU): python3 bench/results/h100/e2e/session7/ab_decode.py [ARMS]
ARMS: comma-free list separated by ';' of COMPRESS_DECODE_W4_FUSE values, default "0;silu;silu,norm;0;silu,norm".
"""

from __future__ import annotations

import gc
import os
import sys
import time

import torch

from compress.bench.e2e_measure import copy_bandwidth_gbs, decode_weight_bytes, prompt_ids
from compress.bench.e2e_synthetic import build_synthetic
from compress.runtime.generate import Generator
from compress.runtime.paths import TABLE

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def main() -> None:
    arms = (sys.argv[1] if len(sys.argv) > 1 else "0;silu;silu,norm;0;silu,norm").split(";")
    dev = torch.device("cuda")
    bw = copy_bandwidth_gbs(dev)
    model = build_synthetic("llama-3-8b", "w4a16", dev, seed=0)
    wbytes = decode_weight_bytes(model)
    bound_ms = wbytes / (bw * 1e9) * 1e3
    log(f"model built; weight bytes {wbytes / 1e9:.3f} GB, copy bw {bw:.0f} GB/s, bound {bound_ms:.3f} ms")
    ids = prompt_ids(model.config.vocab_size, 1, 256, 0, dev)
    tokens = {}
    gen = None
    for idx, arm in enumerate(arms):
        os.environ["COMPRESS_DECODE_W4_FUSE"] = arm
        gen = Generator(model, 1, 256, 512, engine="fast")
        gen.warmup(ids)
        tpots = []
        for _ in range(3):
            out = gen.run(ids)
            tpots.append(out.tpot_s * 1e3)
        tok = out.tokens
        same = {a: bool(torch.equal(tok, t)) for a, t in tokens.items()}
        tokens.setdefault(arm, tok)
        mean = sum(tpots) / len(tpots)
        print(f"ARM fuse={arm or '0'!s:10} TPOT {mean:.4f} ms ({', '.join(f'{t:.4f}' for t in tpots)}) = "
              f"{mean / bound_ms:.3f}x bound {bound_ms:.3f} ms; graphs {gen.graph_note}; tokens equal to {same}", flush=True)
        if idx < len(arms) - 1:
            del gen
            gc.collect()
            torch.cuda.empty_cache()
    for row in TABLE.report():
        if row["layer"] in ("w4a16_silu_down", "w4a16_norm_proj") or (row["layer"].startswith("compress.int4") and row["M"] == 1):
            print(f"PATH {row['layer']} {row['N']}x{row['K']} M={row['M']}: chosen {row['chosen']} {row['us']}", flush=True)
    if gen is not None and gen.g_decode is not None:
        from torch.profiler import ProfilerActivity, profile

        # A run leaves the cache full: start a fresh sequence so the replays stay inside it (call 1 replayed past
        # the end of the cache here and stopped on index_copy_'s bounds assert, after every ARM line was printed).
        gen.ids.copy_(ids)
        gen.engine.reset()
        (gen.g_prefill.replay if gen.g_prefill is not None else gen._prefill_step)()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                gen.g_decode.replay()
            torch.cuda.synchronize()
        print(f"PROFILE last arm (fuse={arms[-1]}), 3 graph replays of the decode step:", flush=True)
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=70), flush=True)
    log("done")


if __name__ == "__main__":
    main()
