"""Same-process A/B of the session-9 decode-step settings on the synthetic Llama-3-8B W4A16, batch 1, decode_bound
shape (256 in, 512 out): the GEMV's L2 prefetch of its own chunk heads before its dependency wait
(COMPRESS_W4A16_L2_PREFETCH_MB, kernels/w4a16_cuda.py; in call 1: of the next layer's weights after the main loop) and
silu * up as a Triton launch under PDL (COMPRESS_DECODE_SILU, compress/runtime/fastpath.py).

One model; per arm one Generator (it captures its own CUDA graphs with the arm's settings), 3 timed runs; arms in
the order given. Prints one ARM line per arm (TPOT, / bound, greedy tokens equal to the earlier arms'), the bound of
the same process (decode weight bytes / copy bandwidth, as `compress bench e2e`), and writes for every arm a
profiler trace of 3 CUDA-graph decode replays (OUT/trace_<i>.json.gz: kernel start/end times, for the gap analysis
in summarize.py) and the top kernels of the last arm.

Usage (repository root, GPU; AB_MODEL=tiny: a CPU dry run): python3 bench/results/h100/e2e/session9/ab_decode.py OUT "PF=0,SILU=compiled;PF=16,SILU=triton"
PF = COMPRESS_W4A16_L2_PREFETCH_MB (calls 1-2), SILU = COMPRESS_DECODE_SILU, FUSE = COMPRESS_DECODE_W4_FUSE,
ATTN = COMPRESS_DECODE_ATTN (call 12), FORCE = COMPRESS_PATH_FORCE (session 11; list values are written with "+",
e.g. FUSE=gate_silu+attn_o); QKV / O / GU / DOWN = a GEMV launch config
"variant/waves/cluster/balanced" for that layer (a picks file); any other NAME=value is set as given.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import sys
import time
from pathlib import Path

import torch

from compress.bench.e2e_measure import copy_bandwidth_gbs, decode_weight_bytes, prompt_ids
from compress.bench.e2e_synthetic import build_synthetic
from compress.runtime.generate import Generator

T0 = time.time()
ALIASES = {"PF": "COMPRESS_W4A16_L2_PREFETCH_MB", "SILU": "COMPRESS_DECODE_SILU", "FUSE": "COMPRESS_DECODE_W4_FUSE",
           "ATTN": "COMPRESS_DECODE_ATTN", "FORCE": "COMPRESS_PATH_FORCE"}  # ATTN: call 12's one-launch attention, since removed
# W4A16 CUDA GEMV launch config per Llama-3-8B decode layer (M <= 8 bucket), "variant/waves/cluster/balanced", written
# to a COMPRESS_W4A16_PICKS file for the arm (kernels/w4a16_cuda.py).
SHAPES = {"QKV": "6144,4096", "O": "4096,4096", "GU": "28672,4096", "DOWN": "4096,14336"}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def parse(arm: str, picks_path: Path) -> dict[str, str]:
    got, picks = {}, {}
    for item in filter(None, (a.strip() for a in arm.split(","))):
        name, _, value = item.partition("=")
        if name in SHAPES:
            v, w, c, b = value.split("/")
            picks[SHAPES[name]] = {"8": [v, float(w), bool(int(c)), bool(int(b))]}
        else:  # a list value is written with "+" (the arm's items are comma-separated): FUSE=gate_silu+attn_o
            got[ALIASES.get(name, name)] = value.replace("+", ",")
    if picks:
        picks_path.write_text(json.dumps(picks))
        got["COMPRESS_W4A16_PICKS"] = str(picks_path)
    return got


def trace(gen, ids, path: Path, table_rows: int = 0) -> None:
    from torch.profiler import ProfilerActivity, profile

    gen.ids.copy_(ids)
    gen.engine.reset()
    (gen.g_prefill.replay if gen.g_prefill is not None else gen._prefill_step)()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            gen.g_decode.replay()
        torch.cuda.synchronize()
    events = [{"name": e.name, "ts": e.time_range.start, "dur": e.time_range.elapsed_us()}
              for e in prof.events() if e.device_type.name == "CUDA"]
    with gzip.open(path, "wt") as f:
        json.dump(events, f)
    if table_rows:
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=table_rows, max_name_column_width=70),
              flush=True)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    arms = sys.argv[2].split(";")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    arch = os.environ.get("AB_MODEL", "llama-3-8b")
    if arch == "tiny":  # a CPU dry run of this script
        from compress.bench import e2e_synthetic as syn

        syn.ARCHS["tiny"] = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=1024,
                                 rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu", attention_bias=False,
                                 mlp_bias=False)
    bw = copy_bandwidth_gbs(dev)
    model = build_synthetic(arch, "w4a16", dev, seed=0)
    wbytes = decode_weight_bytes(model)
    bound_ms = wbytes / (bw * 1e9) * 1e3
    log(f"model built; weight bytes {wbytes / 1e9:.3f} GB, copy bw {bw:.0f} GB/s, bound {bound_ms:.3f} ms")
    ids = prompt_ids(model.config.vocab_size, 1, 256, 0, dev)
    tokens = {}
    for idx, arm in enumerate(arms):
        (out / "picks").mkdir(exist_ok=True)
        env = parse(arm, out / "picks" / f"{idx}.json")
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        gen = Generator(model, 1, 256, 512, engine="fast")
        gen.warmup(ids)
        tpots = []
        for _ in range(3):
            res = gen.run(ids)
            tpots.append(res.tpot_s * 1e3)
        same = {a: bool(torch.equal(res.tokens, t)) for a, t in tokens.items()}
        tokens.setdefault(arm, res.tokens)
        mean = sum(tpots) / len(tpots)
        print(f"ARM {idx} {arm:28} TPOT {mean:.4f} ms ({', '.join(f'{t:.4f}' for t in tpots)}) = "
              f"{mean / bound_ms:.3f}x bound {bound_ms:.3f} ms; graphs {gen.graph_note}; tokens equal to {same}", flush=True)
        from compress.runtime.paths import TABLE

        for row in TABLE.report():  # the GEMVs' paths after the first arm; session 11's folds (w4a16_*) after each
            if (idx == 0 and row["layer"].startswith("compress.int4") or row["layer"].startswith("w4a16_")) and row["M"] == 1:
                print(f"PATH {row['layer']} {row['N']}x{row['K']} M=1: {row['chosen']} {row['us']}", flush=True)
        if gen.g_decode is not None:
            trace(gen, ids, out / f"trace_{idx}.json.gz", 16 if idx == len(arms) - 1 else 0)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        del gen
        gc.collect()
        torch.cuda.empty_cache()
    log("done")


if __name__ == "__main__":
    main()
