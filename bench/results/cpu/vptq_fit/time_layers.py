"""Time the VPTQ fit of a few real SmolLM2-135M layers, phase by phase (issue 4: fitting speed on CPU).

What it runs is what `apply_vptq` (compress/vptq/stage.py) runs for these layers, with the same preset:
1. equalisation folded into the model (cfg.equalize), as the stage does first;
2. the shared codebooks of the chosen layers' scopes (`_fit_shared_codebooks`: diag(H) over the float
   model, main k-means on <= kmeans_max_samples vectors of every layer of the scope, residual k-means);
3. block 0's Hessians (one float pass with the stage's `_HessianHooks`; in the stage block 0 also sees the
   float model, so these are the stage's Hessians), then `fit_vptq_joint` per layer with the shared books.
Phases are timed by wrapping the functions the fit calls (module attributes), so the same script times
the code before and after a change: `PYTHONPATH=<old checkout> python .../time_layers.py ...`.
It prints a table and writes JSON with per-phase wall and CPU seconds, each layer's proxy loss and a
sha256 over the packed tensors (equal digests = the same bytes out).

    OMP_NUM_THREADS=2 python bench/results/cpu/vptq_fit/time_layers.py --out /tmp/vptq_time.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

import torch

HF_DIR = Path("/tmp/smol-hf")  # bf16 HF copy of the embedded GGUF (made below when missing)
LAYERS = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"]


class PhaseClock:
    """Accumulates wall and process-CPU seconds per phase name; nested phases are excluded from the outer one."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list] = []

    @contextmanager
    def phase(self, name: str):
        start = [time.perf_counter(), time.process_time(), 0.0, 0.0]  # wall0, cpu0, child wall, child cpu
        self._stack.append(start)
        try:
            yield
        finally:
            self._stack.pop()
            wall = time.perf_counter() - start[0]
            cpu = time.process_time() - start[1]
            self.wall[name] = self.wall.get(name, 0.0) + wall - start[2]
            self.cpu[name] = self.cpu.get(name, 0.0) + cpu - start[3]
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._stack:  # the parent must not count this time twice
                self._stack[-1][2] += wall
                self._stack[-1][3] += cpu

    def wrap(self, module, attr: str, name: str) -> None:
        """Replace module.attr by a timed wrapper (skipped when the attribute does not exist)."""
        fn = getattr(module, attr, None)
        if fn is None:
            return

        def timed(*a, **kw):
            with self.phase(name):
                return fn(*a, **kw)

        setattr(module, attr, timed)

    def take(self) -> dict:
        out = {k: {"wall_s": round(self.wall[k], 3), "cpu_s": round(self.cpu[k], 3), "calls": self.calls[k]} for k in self.wall}
        self.wall, self.cpu, self.calls = {}, {}, {}
        return out


def ensure_hf_copy() -> Path:
    """SmolLM2-135M-Instruct as an HF folder (loading the GGUF dequantizes it each time, which is slow)."""
    if (HF_DIR / "model.safetensors").is_file():
        return HF_DIR
    from compress.model_source import default_model, load_model, load_tokenizer

    src = default_model()
    model = load_model(src, "cpu", torch.bfloat16)
    model.save_pretrained(HF_DIR)
    load_tokenizer(src).save_pretrained(HF_DIR)
    return HF_DIR


def digest(vq) -> str:
    h = hashlib.sha256()
    for name in ("codebook", "indices", "res_codebook", "res_indices", "scale", "bias"):
        t = getattr(vq, name)
        if t is not None:
            h.update(name.encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--preset", default="vptq_v8_k4096_r128")
    ap.add_argument("--layers", nargs="+", default=LAYERS)
    ap.add_argument("--kmeans-iters", type=int, default=None, help="override the preset's Lloyd iterations (both runs alike)")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import compress.vptq.fit as fit_mod
    import compress.vptq.kmeans as km_mod
    import compress.vptq.stage as stage_mod
    from calibration import build_calibration_set, load_documents
    from compress.vptq.config import preset
    from compress.vptq.equalize import equalize_model

    overrides = {"kmeans_iters": args.kmeans_iters} if args.kmeans_iters else {}
    cfg = preset(args.preset, **overrides)
    clock = PhaseClock()
    # Names differ between the old and new code; missing ones are skipped (wrap), so both can be timed.
    clock.wrap(km_mod, "_kmeanspp_init", "kmeans++ init")
    for mod in (stage_mod, fit_mod):
        clock.wrap(mod, "weighted_kmeans", "k-means (Lloyd)")
        clock.wrap(mod, "nearest", "nearest (residual targets)")
    clock.wrap(fit_mod, "column_importance", "column importance")
    clock.wrap(fit_mod, "inverse_hessian_factor", "Cholesky factor")
    clock.wrap(fit_mod, "gptq_assign", "assignment + error feedback")
    clock.wrap(fit_mod, "rescale_rows", "row rescale")
    clock.wrap(fit_mod, "refine_codebooks", "centroid refinement")
    clock.wrap(fit_mod, "proxy_loss", "proxy loss")
    clock.wrap(fit_mod, "_pack", "pack")

    t0 = time.perf_counter()
    path = ensure_hf_copy()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    calib = build_calibration_set(load_documents("c4"), tok, args.samples, args.seq_len, seed=0, layout="stream")
    batches = calib.samples
    linears = stage_mod.target_linears(model, ["Linear"], ["lm_head"])
    _, blocks = stage_mod.decoder_blocks(model, linears)
    vlens = {n: stage_mod.vector_len_for(n, m.out_features, cfg) for n, m in linears.items()}
    with torch.no_grad():
        if cfg.equalize > 0:
            equalize_model(blocks, linears, cfg.equalize)
    setup_s = time.perf_counter() - t0

    # Shared codebooks of the chosen layers' scopes, fitted on every layer of each scope (as the stage does).
    keys = {stage_mod.scope_key(n, vlens[n], cfg) for n in args.layers}
    members = {n: m for n, m in linears.items() if stage_mod.scope_key(n, vlens[n], cfg) in keys}
    shared_phases = {}
    shared = {}
    if cfg.scope != "layer":
        for key in sorted(keys):
            scope = {n: m for n, m in members.items() if stage_mod.scope_key(n, vlens[n], cfg) == key}
            w0, c0 = time.perf_counter(), time.process_time()
            shared.update(stage_mod._fit_shared_codebooks(model, batches, scope, vlens, cfg, torch.device("cpu"), None))
            shared_phases[key] = {
                "layers": len(scope), "wall_s": round(time.perf_counter() - w0, 3), "cpu_s": round(time.process_time() - c0, 3),
                "phases": clock.take(),
            }
            print(f"shared codebook {key}: {shared_phases[key]['wall_s']:.1f} s wall", flush=True)

    # Block-0 Hessians from the float model (the stage's hooks and normalisation).
    with torch.no_grad():
        hooks = stage_mod._HessianHooks({n: linears[n] for n in args.layers}, diag_only=False)
        try:
            for b in batches:
                hooks.mask = stage_mod._token_mask(b)
                model.model(**b, use_cache=False)
        finally:
            hooks.remove()

    per_layer = {}
    for name in args.layers:
        v = vlens[name]
        key = stage_mod.scope_key(name, v, cfg)
        main, res = shared.get(key, (None, None)) if key is not None else (None, None)
        w0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            (vq,) = fit_mod.fit_vptq_joint(
                [linears[name].weight.detach()], hooks.result(name), cfg, codebook=main, res_codebook=res,
                codebook_key=key, res_codebook_key=key if res is not None else None, vector_len=v, names=[name],
            )
        per_layer[name] = {
            "shape": list(linears[name].weight.shape),
            "wall_s": round(time.perf_counter() - w0, 3), "cpu_s": round(time.process_time() - c0, 3),
            "proxy_loss": vq.extra["proxy_loss"], "digest": digest(vq), "phases": clock.take(),
        }
        print(f"{name}: {per_layer[name]['wall_s']:.2f} s wall, proxy loss {vq.extra['proxy_loss']:.6f}", flush=True)

    result = {
        "preset": args.preset, "config": cfg.model_dump(), "torch": torch.__version__,
        "omp_threads": os.environ.get("OMP_NUM_THREADS"), "cpu_count": os.cpu_count(),
        "calibration": {"samples": args.samples, "seq_len": args.seq_len, "source": "c4", "layout": "stream"},
        "setup_s": round(setup_s, 1), "shared_codebooks": shared_phases, "layers": per_layer,
        "codebook_digests": {k: hashlib.sha256(b"".join(t.numpy().tobytes() for t in pair if t is not None)).hexdigest()[:16]
                             for k, pair in shared.items()},
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"\n{'phase':34s} " + " ".join(f"{n.split('.')[-1]:>12s}" for n in [*shared_phases, *per_layer]))
    names = sorted({p for d in [*shared_phases.values(), *per_layer.values()] for p in d["phases"]})
    for p in names:
        cells = [d["phases"].get(p, {}).get("wall_s", 0.0) for d in [*shared_phases.values(), *per_layer.values()]]
        print(f"{p:34s} " + " ".join(f"{c:12.2f}" for c in cells))
    cells = [d["wall_s"] for d in [*shared_phases.values(), *per_layer.values()]]
    print(f"{'total (wall s)':34s} " + " ".join(f"{c:12.2f}" for c in cells))


if __name__ == "__main__":
    main()
