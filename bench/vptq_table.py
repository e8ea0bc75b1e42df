"""Issue-4 measurements in one script: VPTQ presets vs llmcompressor GPTQ on SmolLM2-135M, seed stability,
fitting times; writes vptq_table.json and vptq_table.md to --out after every row (a killed run keeps
what it finished, and --resume continues from it).

Protocol: calibration = 128 windows x 512 tokens from the local C4 sample (calibration.sampling, seed 0),
the same windows for VPTQ and GPTQ; perplexity = WikiText-2 raw test, seq-len 2048, non-overlapping
windows over the whole test set (eval.perplexity, tail shorter than a window dropped). The model runs
in float32. Bits per weight are over the quantized Linear weights (lm_head/embeddings excluded) and
count everything stored for them: indices, row scales, and each codebook once (VPTQ); packed integers,
fp16 scales and zero points (GPTQ, asymmetric, group 64).

    python bench/vptq_table.py --out bench/results/h100/vptq                 # everything (H100: > 40 min)

Measured on an H100 (session 2): GPTQ rows ~7 s of fitting each, but one VPTQ preset row (vptq_v8_k4096_r128,
layer-wise fit) 381 s: the column-by-column assignment is launch-bound (about 150 k columns of SmolLM2,
tens of small kernels each). Split the rows over several runs with --resume.
    python bench/vptq_table.py --out /tmp/t --rows vptq:vptq_v8_k4096_r256 --max-windows 8   # a quick look
    python bench/vptq_table.py --out /tmp/cpu --device cpu --rows vptq:vptq_v8_k4096_r256 --no-eval  # CPU fit time
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from compress.errors import CompressError  # noqa: E402

DEFAULT_ROWS = [
    "base",
    "gptq:2", "gptq:3", "gptq:4",
    "vptq:vptq_v8_k4096_r128", "vptq:vptq_v8_k65536", "vptq:vptq_v8_k4096_r256", "vptq:vptq_v8_k8192_r512",
    "vptq:vptq_v8_k65536_r256",
    "seed:vptq_v8_k4096_r128:1", "seed:vptq_v8_k4096_r128:2",
    "layer:vptq_v8_k65536:4096x14336", "layer:vptq_v8_k4096_r256:4096x14336",
]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(0)
    return f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


class Bench:
    def __init__(self, args, need_model: bool = True):
        from calibration.sampling import build_calibration_set, load_documents
        from compress.model_source import load_model, load_tokenizer, resolve_device, resolve_model
        from eval.perplexity import tokenize_eval_text

        self.args = args
        self.device = resolve_device(args.device)
        self.src = self.calib = None
        self.load_s = 0.0
        if not need_model:  # single-layer timing rows only: synthetic tensors, no model or data
            return
        self.src = resolve_model(args.model)
        self.tokenizer = load_tokenizer(self.src)
        t = time.perf_counter()
        # A pristine float32 copy on the CPU; every row starts from a deep copy of it.
        self.pristine = load_model(self.src, "cpu", torch.float32)
        self.load_s = time.perf_counter() - t
        docs = load_documents(str(args.calibration))
        self.calib = build_calibration_set(docs, self.tokenizer, args.calib_samples, args.calib_seq_len, seed=0, layout="stream")
        self.eval_ids = tokenize_eval_text(Path(args.eval_text).read_text(), self.tokenizer)

    def model(self):
        return copy.deepcopy(self.pristine).to(self.device)

    def ppl(self, model) -> dict | None:
        if self.args.no_eval:
            return None
        from eval.perplexity import perplexity

        r = perplexity(model, self.eval_ids, self.args.eval_seq_len, self.args.max_windows, dataset="wikitext2-raw-test")
        return {"ppl": r.ppl, "windows": r.windows, "tokens_scored": r.tokens_scored, "seconds": r.seconds}

    # ---- rows -------------------------------------------------------------------------------------

    def base(self) -> dict:
        return {"method": "float32 (no quantization)", "bits_per_weight": 32.0, "eval": self.ppl(self.model())}

    def gptq(self, bits: int) -> dict:
        import yaml
        from llmcompressor import oneshot

        from compress import compat

        model = self.model()
        recipe = {
            "gptq_stage": {
                "gptq_modifiers": {
                    "GPTQModifier": {
                        "targets": ["Linear"],
                        "ignore": ["lm_head"],
                        "dampening_frac": 0.01,
                        "config_groups": {
                            "group_0": {
                                "targets": ["Linear"],
                                "weights": {"num_bits": bits, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64},
                            }
                        },
                    }
                }
            }
        }
        _sync(self.device)
        t = time.perf_counter()
        with compat.config_folder_for_oneshot(model):
            oneshot(
                model=model, recipe=yaml.safe_dump(recipe), dataset=self.calib.dataloader(),
                num_calibration_samples=self.calib.num_samples, max_seq_length=self.calib.seq_len, processor=self.tokenizer,
            )
        _sync(self.device)
        fit_s = time.perf_counter() - t
        weights = stored = 0
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear) and hasattr(m, "weight_scale") and name != "lm_head":
                weights += m.weight.numel()
                # packed b-bit integers, 16-bit scales, b-bit packed zero points (compressed-tensors pack-quantized)
                stored += m.weight.numel() * bits + m.weight_scale.numel() * 16 + m.weight_zero_point.numel() * bits
        return {
            "method": f"GPTQ int{bits} asym g64 (llmcompressor)", "bits_per_weight": stored / max(weights, 1),
            "fit_seconds": fit_s, "eval": self.ppl(model),
        }

    def vptq(self, preset: str, seed: int = 0, overrides: dict | None = None) -> dict:
        from compress.vptq import VPTQModifierConfig, apply_vptq

        extra = {**self.args.overrides, **(overrides or {})}
        cfg = VPTQModifierConfig(preset=preset, seed=seed, **extra)
        model = self.model()
        _sync(self.device)
        t = time.perf_counter()
        result = apply_vptq(model, self.calib.samples, cfg, progress=self._progress, device=self.device)
        _sync(self.device)
        fit_s = time.perf_counter() - t
        size = result.size_report()
        losses = [s["proxy_loss"] for s in result.stats.values()]
        label = f"VPTQ {preset}" + (" (" + ", ".join(f"{k}={v}" for k, v in sorted((overrides or {}).items())) + ")" if overrides else "")
        return {
            "method": label, "preset": preset, "seed": seed, "overrides": overrides or {}, "config": result.config.model_dump(),
            "folds": sum(len(f) for f in result.folds.values()), "finetune": result.finetune,
            "bits_per_weight": size["bits_per_weight"], "size": size, "fit_seconds": fit_s,
            "mean_proxy_loss": sum(losses) / len(losses), "eval": self.ppl(model),
        }

    def layer(self, preset: str, n: int = 14336, k: int = 4096, tokens: int = 8192) -> dict:
        """Fit time of one Llama-3-8B-sized layer (out 14336, in 4096), per-layer codebook. Weights and
        activations are synthetic (no such model offline): the time depends on shapes, not values."""
        from compress.vptq import fit_vptq, preset as get_preset

        gen = torch.Generator(device="cpu").manual_seed(0)
        w = (0.02 * torch.randn(n, k, generator=gen)).to(self.device)
        x = torch.randn(tokens, k, generator=gen) * torch.exp(torch.randn(k, generator=gen))  # anisotropic channels
        x = x.to(self.device)
        h = x.t() @ x / tokens
        cfg = get_preset(preset, scope="layer", **self.args.overrides)
        _sync(self.device)
        t = time.perf_counter()
        vq = fit_vptq(w, h, cfg, name=f"synthetic {n}x{k}")
        _sync(self.device)
        fit_s = time.perf_counter() - t
        bits = (vq.index_storage_bits() + sum(vq.codebook_bits("layer").values())) / (n * k)
        return {
            "method": f"one {n}x{k} layer, {preset}, per-layer codebook", "preset": preset, "shape": [n, k],
            "bits_per_weight": bits, "fit_seconds": fit_s, "proxy_loss": vq.extra["proxy_loss"],
        }

    def _progress(self, step: int, total: int, msg: str) -> None:
        if self.args.verbose:
            print(f"  [{step}/{total}] {msg}", flush=True)

    def run(self, row: str) -> dict:
        kind, _, rest = row.partition(":")
        if kind == "base":
            return self.base()
        if kind == "gptq":
            return self.gptq(int(rest))
        if kind == "vptq":
            preset, _, sets = rest.partition(":")
            # vptq:<preset>:field=value,field=value (ablations, e.g. equalize=0)
            # values may be JSON with commas (res_centroids_by_type={"q_proj":0,"up_proj":512}): split before `name=`
            overrides = {a: json.loads(b) for a, b in (item.split("=", 1) for item in re.split(r",(?=\w+=)", sets) if item)}
            return self.vptq(preset, overrides=overrides or None)
        if kind == "seed":
            preset, _, seed = rest.partition(":")
            return self.vptq(preset, int(seed))
        if kind == "layer":
            preset, _, shape = rest.partition(":")
            n, k = (int(d) for d in (shape or self.args.layer_shape).split("x"))
            return self.layer(preset, n, k)
        raise CompressError(
            f"unknown row {row!r}; rows look like base, gptq:3, vptq:<preset>[:field=value,...], seed:<preset>:<seed>, "
            "layer:<preset>[:<out>x<in>]"
        )


def _write(path: Path, text: str) -> None:
    """Atomic: a run killed by a timeout leaves the previous complete file, never half of one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def render_markdown(doc: dict) -> str:
    rows = doc["rows"]
    env = doc["environment"]
    lines = [
        "# VPTQ vs GPTQ on SmolLM2-135M-Instruct (issue 4)",
        "",
        f"Device: {env['device_name']} ({env['device']}), torch {env['torch']}. Command: `{env['command']}`",
        "",
        f"Calibration: {env['calibration']}. Perplexity: WikiText-2 raw test, seq-len {env['eval_seq_len']}, "
        + ("non-overlapping windows over the whole test set (tail dropped)" if not env.get("max_windows") else f"only the first {env['max_windows']} windows")
        + ", float32 model. Bits per weight over the "
        "quantized Linear weights (lm_head and embeddings stay float): VPTQ counts indices, row scales and every "
        "codebook once; GPTQ counts packed ints, fp16 scales and zero points.",
        "",
        "| method | bits / weight | WikiText-2 PPL | windows | fit time (s) | device |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, r in rows.items():
        if key.startswith(("base", "gptq", "vptq")):
            ev = r.get("eval") or {}
            lines.append(
                f"| {r['method']} | {_fmt(r['bits_per_weight'], '.3f')} | {_fmt(ev.get('ppl'))} | {ev.get('windows', '-')} "
                f"| {_fmt(r.get('fit_seconds'), '.1f')} | {r.get('device', env['device_name'])} |"
            )
    seeds = {
        k: r for k, r in rows.items()
        if k.startswith("seed:") or (k.startswith("vptq:") and r.get("seed") == 0 and not r.get("overrides"))
    }
    by_preset: dict[str, list] = {}
    for r in seeds.values():
        if (r.get("eval") or {}).get("ppl") is not None:
            by_preset.setdefault(r["preset"], []).append((r["seed"], r["eval"]["ppl"]))
    for preset, vals in by_preset.items():
        if len(vals) < 2:
            continue
        vals.sort()
        ppls = [p for _, p in vals]
        spread = 100 * (max(ppls) - min(ppls)) / min(ppls)
        lines += ["", f"Seed stability, {preset}: " + ", ".join(f"seed {s}: {p:.2f}" for s, p in vals)
                  + f" -> spread (max-min)/min = {spread:.2f}%"]
    layer_rows = [r for k, r in rows.items() if k.startswith("layer:")]
    if layer_rows:
        lines += ["", "| fitting time, one layer | bits / weight | proxy loss | fit time (s) | device |", "| --- | ---: | ---: | ---: | --- |"]
        for r in layer_rows:
            lines.append(
                f"| {r['method']} | {r['bits_per_weight']:.3f} | {r['proxy_loss']:.4f} | {r['fit_seconds']:.1f} "
                f"| {r.get('device', env['device_name'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--model", default=None, help="model folder or .gguf (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="auto")
    p.add_argument("--rows", nargs="+", default=DEFAULT_ROWS)
    p.add_argument("--calibration", default=str(ROOT.parent / "shared/assets/corpora/c4_sample_300.jsonl"))
    p.add_argument("--eval-text", default=str(ROOT.parent / "shared/assets/corpora/wikitext2_raw_test.txt"))
    p.add_argument("--calib-samples", type=int, default=128)
    p.add_argument("--calib-seq-len", type=int, default=512)
    p.add_argument("--eval-seq-len", type=int, default=2048)
    p.add_argument("--max-windows", type=int, default=None, help="evaluate only this many windows (quick looks)")
    p.add_argument("--no-eval", action="store_true", help="fit only (fitting-time measurements)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--layer-shape", default="14336x4096", help="out x in of the single-layer timing rows")
    p.add_argument("--resume", action="store_true", help="keep rows already in --out/vptq_table.json")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--merge", nargs="*", default=[], type=Path, help="also take the rows of these vptq_table.json files")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="override VPTQ preset fields (experiments)")
    args = p.parse_args(argv)
    args.overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = args.out / "vptq_table.json", args.out / "vptq_table.md"
    doc = json.loads(json_path.read_text()) if args.resume and json_path.is_file() else {"rows": {}}
    if args.merge:
        # Render only: rows measured elsewhere (e.g. GPTQ on CPU, VPTQ on GPU) into one table.
        for path in args.merge:
            other = json.loads(path.read_text())
            for key, r in other["rows"].items():
                doc["rows"].setdefault(key, r | {"device": r.get("device", other["environment"]["device_name"])})
            doc.setdefault("environment", other["environment"])
        ordered = {k: doc["rows"][k] for k in DEFAULT_ROWS if k in doc["rows"]}
        doc["rows"] = ordered | {k: r for k, r in doc["rows"].items() if k not in ordered}
        _write(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        _write(md_path, render_markdown(doc))
        print(md_path.read_text())
        return 0
    try:
        bench = Bench(args, need_model=any(not r.startswith("layer:") for r in args.rows))
    except CompressError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    doc["environment"] = {
        "device": bench.device, "device_name": device_name(bench.device), "torch": torch.__version__,
        "command": "python bench/vptq_table.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "calibration": f"{bench.calib.num_samples} x {bench.calib.seq_len} tokens of {Path(args.calibration).name}" if bench.calib else "-",
        "eval_seq_len": args.eval_seq_len, "max_windows": args.max_windows, "model": bench.src.spec if bench.src else "-",
        "model_load_seconds": bench.load_s,
    }
    for row in args.rows:
        if row in doc["rows"]:
            print(f"{row}: kept from earlier run", flush=True)
            continue
        t = time.perf_counter()
        try:
            doc["rows"][row] = bench.run(row) | {"device": doc["environment"]["device_name"], "command": doc["environment"]["command"]}
        except CompressError as e:
            print(f"error in {row}: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # noqa: BLE001 -- one broken row (e.g. out of GPU memory) must not lose the others
            import traceback

            traceback.print_exc()
            failed = doc.setdefault("failed", {})
            failed[row] = f"{type(e).__name__}: {e}"
            _write(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        r = doc["rows"][row]
        print(f"{row}: bits {r['bits_per_weight']:.3f} ppl {_fmt((r.get('eval') or {}).get('ppl'))} "
              f"fit {_fmt(r.get('fit_seconds'), '.1f')} s (row {time.perf_counter() - t:.0f} s)", flush=True)
        _write(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        _write(md_path, render_markdown(doc))
    print(md_path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
