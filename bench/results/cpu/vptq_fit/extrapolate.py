"""Per-phase table of time_layers.py runs and an extrapolated whole-model VPTQ fit time for SmolLM2-135M.

    python bench/results/cpu/vptq_fit/extrapolate.py before.json after.json [--config /tmp/smol-hf/config.json]

Model shapes come from the HF config.json. The extrapolation is a sum of measured parts, each scaled by
what it is proportional to (stated per line below); it assumes every k-means runs the preset's full
kmeans_iters (the tol stop can only shorten it) and leaves out the decoder-block forward passes of the
stage (one calibration pass per block, seconds on this model).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compress.vptq.config import preset

PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
# Which measured layer / scope stands in for each projection: same shape, or (k/v) a smaller one measured
# through the q_proj numbers scaled by vector count.
PROXY = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.q_proj", "self_attn.v_proj": "self_attn.q_proj",
         "self_attn.o_proj": "self_attn.q_proj", "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.gate_proj",
         "mlp.down_proj": "mlp.down_proj"}


def shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    q = cfg["num_attention_heads"] * hd
    return {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h), "self_attn.o_proj": (h, q),
            "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h), "mlp.down_proj": (h, inter)}


def phase(d: dict, name: str) -> float:
    return d["phases"].get(name, {}).get("wall_s", 0.0)


def extrapolate(run: dict, cfg: dict) -> tuple[float, float, list[str]]:
    vcfg = run["config"]
    layers = cfg["num_hidden_layers"]
    sh = shapes(cfg)
    v, cap, iters = vcfg["vector_len"], vcfg["kmeans_max_samples"], vcfg["kmeans_iters"]
    measured_iters = iters  # the run's own config (time_layers --kmeans-iters may have lowered it)
    full_iters = preset(run["preset"]).kmeans_iters  # what the preset runs
    lines = []
    kmeans_total = 0.0
    for p in PROJ:
        src = run["shared_codebooks"][PROXY[p]]
        n_src = min(layers * sh[PROXY[p]][0] * sh[PROXY[p]][1] // v, cap)
        n = min(layers * sh[p][0] * sh[p][1] // v, cap)
        lloyd = phase(src, "k-means (Lloyd)") * (full_iters / measured_iters) * n / n_src  # per step: linear in samples
        near = phase(src, "nearest (residual targets)") * n / n_src
        fixed = src["wall_s"] - phase(src, "k-means (Lloyd)") - phase(src, "nearest (residual targets)")  # diag(H) pass, init
        t = fixed + lloyd + near
        kmeans_total += t
        lines.append(f"  codebook {p:18s} {n:8d} vectors: {t:8.1f} s")
    per_block = 0.0
    for p in PROJ:
        per_block += run["layers"][f"model.layers.0.{PROXY[p]}"]["wall_s"]  # k/v: q_proj's time, an upper bound
    lines.append(f"  per-layer fits: {per_block:.1f} s per block x {layers} blocks = {per_block * layers:.1f} s")
    return kmeans_total, per_block * layers, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="time_layers.py JSON files (e.g. before, after)")
    ap.add_argument("--config", default="/tmp/smol-hf/config.json")
    args = ap.parse_args()
    cfg = json.loads(Path(args.config).read_text())
    runs = [json.loads(Path(r).read_text()) for r in args.runs]
    names = [Path(r).stem for r in args.runs]
    parts = [(k, "scope") for k in runs[0]["shared_codebooks"]] + [(k, "layer") for k in runs[0]["layers"]]
    for key, kind in parts:
        ds = [r["shared_codebooks" if kind == "scope" else "layers"][key] for r in runs]
        print(f"\n{kind} {key}")
        for p in sorted({p for d in ds for p in d["phases"]}):
            print(f"  {p:32s} " + " ".join(f"{phase(d, p):9.2f}" for d in ds))
        print(f"  {'total wall s':32s} " + " ".join(f"{d['wall_s']:9.2f}" for d in ds))
        print(f"  {'total CPU s':32s} " + " ".join(f"{d['cpu_s']:9.2f}" for d in ds))
        if kind == "layer":
            print(f"  {'proxy loss':32s} " + " ".join(f"{d['proxy_loss']:.7f}" for d in ds))
            print(f"  {'digest':32s} " + " ".join(f"{d['digest']}" for d in ds))
    print("\ncodebook digests: " + "; ".join(f"{n}: {r['codebook_digests']}" for n, r in zip(names, runs)))
    for n, r in zip(names, runs):
        km, fits, lines = extrapolate(r, cfg)
        print(f"\n{n}: whole-model extrapolation (the preset's kmeans_iters)")
        print("\n".join(lines))
        print(f"  total: shared codebooks {km / 60:.1f} min + layer fits {fits / 60:.1f} min = {(km + fits) / 60:.1f} min")


if __name__ == "__main__":
    main()
