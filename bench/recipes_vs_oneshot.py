"""Issue-2 acceptance table: every bundled recipe through `compress run` and through llmcompressor's
own `oneshot` used directly (same recipe, same calibration documents and sizes, same perplexity
protocol), on one model, for one or several seeds. Writes recipes.md / recipes.json to --out.

Fairness: both arms run in one process, so before the table untimed warm-ups run the `original` and
`fp8_dynamic` recipes through both, scoring one window (imports, CUDA/cuBLAS start-up, the compressed
save's first-call set-up and the model file's page cache are then paid by neither timed arm), and the
arm that runs first alternates from seed to seed (1st, 3rd, ... seed given: compress first; 2nd, 4th: oneshot
first). Calibration data (`--oneshot-data`): by default oneshot is handed exactly the documents compress
calibrates on for that seed (`calibration.calibration_documents`), so the two arms differ only in the tool;
with `own` it draws its own from the whole corpus (RandomSampler seeded by `torch.manual_seed(seed)`),
and then one seed's pair differs by sampling luck as much as by tool: compare means over seeds.

The direct-oneshot arm is what a user of llmcompressor would write: a `datasets.Dataset` with a
"text" column, `num_calibration_samples`, `max_seq_length`, one `oneshot` call for the whole
recipe, `save_pretrained(save_compressed=True)`; its checkpoint is then scored by transformers
alone. Wall time compares the same work on both sides: load + data + compression + save.

    python bench/recipes_vs_oneshot.py --model /tmp/smol/SmolLM2-135M-Instruct.Q4_1.gguf --out DIR
    python bench/recipes_vs_oneshot.py --merge DIR_A/recipes.json DIR_B/recipes.json --out DIR
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import time
from pathlib import Path

import torch


def oneshot_direct(model_spec: str, recipe_name: str, docs: list[str], num_samples: int, seq_len: int, out: Path, device: str,
                   seed: int = 0, shuffle: bool = True):
    from datasets import Dataset
    from llmcompressor import oneshot

    from compress import compat
    from compress.model_source import load_model, load_tokenizer, resolve_model
    from compress.recipe import load_recipe

    compat.quiet_third_party()
    compat.patch_awq_pin_memory_on_cpu()
    recipe = load_recipe(recipe_name)
    t0 = time.perf_counter()
    src = resolve_model(model_spec)
    tok = load_tokenizer(src)
    model = load_model(src, device)
    if recipe.llmcompressor_dict:
        ds = Dataset.from_list([{"text": d} for d in docs])
        torch.manual_seed(seed)  # llmcompressor's RandomSampler draws the calibration documents from it
        with compat.config_folder_for_oneshot(model):
            oneshot(model=model, recipe=recipe.llmcompressor_yaml(), dataset=ds, processor=tok,
                    num_calibration_samples=num_samples, max_seq_length=seq_len, shuffle_calibration_samples=shuffle)
    model.save_pretrained(out, save_compressed=bool(recipe.llmcompressor_dict))
    tok.save_pretrained(out)
    wall = time.perf_counter() - t0
    violations = None
    if "sparse" in recipe_name:
        from compress.checkpoint import stored_weight

        violations = 0
        for layer in [f"model.layers.{i}.{m}" for i in range(model.config.num_hidden_layers) for m in
                      ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]:
            w = stored_weight(out, layer)
            violations += int(((w.reshape(w.shape[0], -1, 4) != 0).sum(-1) > 2).sum())
    del model
    gc.collect()
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return wall, violations


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--recipes", nargs="*", default=None)
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    ap.add_argument("--num-samples", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--eval-seq-len", type=int, default=2048)
    ap.add_argument("--max-windows", type=int, default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--oneshot-first", action="store_true", help="oneshot's arm runs first for the 1st, 3rd, ... seed (default: compress's)")
    ap.add_argument("--batch-size", default=None,
                    help="compress's calibration batch size: a number or 'auto' (default: compress's own, 1, which feeds "
                         "llmcompressor what oneshot builds)")
    ap.add_argument("--oneshot-data", choices=("same", "own"), default="same",
                    help="same: oneshot gets exactly the documents compress calibrates on (default); own: oneshot draws "
                         "its own from the whole corpus with its RandomSampler seeded by --seeds")
    ap.add_argument("--merge", nargs="*", type=Path, help="merge these recipes.json files into --out (no runs)")
    ap.add_argument("--merge-log", nargs="*", type=Path, help="rebuild recipes.json/.md in --out from the ROW lines of these logs (no runs)")
    args = ap.parse_args()
    if args.merge_log:
        rows, vers = [], []
        for p in args.merge_log:
            for line in p.read_text(errors="replace").splitlines():
                if line.startswith("VERSIONS "):
                    vers.append(json.loads(line[9:]))
                elif line.startswith("ROW "):
                    try:
                        rows.append(json.loads(line[4:]))
                    except json.JSONDecodeError:  # a row cut off when the call's time ran out
                        print(f"skipped an incomplete ROW line in {p}: {line[:120]}...", file=sys.stderr)
        doc = {"versions": vers[-1] if vers else {}, "args": {"model": args.model, "seeds": sorted({r["seed"] for r in rows}), "num_samples": args.num_samples,
                                        "seq_len": args.seq_len, "eval_seq_len": args.eval_seq_len, "max_windows": args.max_windows},
               "sources": [str(p) for p in args.merge_log], "rows": rows}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "recipes.json").write_text(json.dumps(doc, indent=2))
        (args.out / "recipes.md").write_text(render(doc))
        print(render(doc))
        return
    if args.merge:
        docs = [json.loads(p.read_text()) for p in args.merge]
        merged = {"versions": docs[-1]["versions"], "args": docs[-1]["args"], "sources": [str(p) for p in args.merge],
                  "rows": [r for d in docs for r in d["rows"]]}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "recipes.json").write_text(json.dumps(merged, indent=2))
        (args.out / "recipes.md").write_text(render(merged))
        print(render(merged))
        return
    if not args.model:
        ap.error("--model is required unless --merge is given")

    from calibration import load_documents
    from compress.model_source import resolve_device
    from compress.progress import Progress
    from compress.recipe import bundled_recipe_names
    from compress.report import versions

    device = resolve_device(args.device)
    recipes = args.recipes or [n for n in bundled_recipe_names() if not n.startswith("vptq")]
    args.out.mkdir(parents=True, exist_ok=True)
    docs = load_documents("c4")
    progress = Progress(enabled=True)
    if not args.no_warmup:
        # fp8_dynamic: data-free and quick, and it goes through the compressed save (whose first call on
        # a GPU costs ~1.5 s of one-time set-up that would otherwise fall on whichever arm runs first).
        warm = argparse.Namespace(**{**vars(args), "max_windows": 1})
        for name in ("original", "fp8_dynamic"):
            measure(warm, name, 0, docs, device, progress)
    print("VERSIONS " + json.dumps(versions(), default=str), flush=True)
    rows = []
    for name in recipes:
        for i, seed in enumerate(args.seeds):
            rows.append(measure(args, name, seed, docs, device, progress, oneshot_first=(i % 2 == 1) != args.oneshot_first))
            # one JSON line per finished row on stdout: a run cut short still leaves its rows in the log
            # (`--merge-log LOG` rebuilds recipes.json/.md from such lines)
            print("ROW " + json.dumps(rows[-1], default=str), flush=True)
            doc = {"versions": versions(), "args": vars(args) | {"out": str(args.out)}, "rows": rows}
            (args.out / "recipes.json").write_text(json.dumps(doc, indent=2, default=str))
            (args.out / "recipes.md").write_text(render(json.loads(json.dumps(doc, default=str))))
    print(render(json.loads((args.out / "recipes.json").read_text())))


def measure(args, name: str, seed: int, docs, device: str, progress, oneshot_first: bool = False) -> dict:
    """One recipe, one seed, both arms: ours through `run` and llmcompressor's `oneshot` directly, in the
    order given."""
    from transformers import AutoTokenizer

    from compress.checkpoint import load_checkpoint
    from compress.evaluation import load_eval_text
    from compress.pipeline import RunOptions, _ppl, run
    from compress.report import versions

    work = args.out / "checkpoints"
    ours_dir, theirs_dir = work / f"compress-{name}", work / f"oneshot-{name}"
    def theirs_arm():
        shutil.rmtree(theirs_dir, ignore_errors=True)
        if args.oneshot_data == "same":  # exactly the documents compress calibrates on; oneshot orders them by length
            from calibration import calibration_documents
            from compress.model_source import load_tokenizer, resolve_model

            same = calibration_documents(docs, load_tokenizer(resolve_model(args.model)), args.num_samples, seed)
            return oneshot_direct(args.model, name, same, args.num_samples, args.seq_len, theirs_dir, device, seed, shuffle=False)
        return oneshot_direct(args.model, name, docs.docs, args.num_samples, args.seq_len, theirs_dir, device, seed)

    if oneshot_first:  # alternate which arm runs first, so warm caches and clocks favour neither
        their_wall, violations = theirs_arm()
    res = run(RunOptions(name, args.model, "c4", args.num_samples, args.seq_len, ours_dir, seed, device, True,
                         "wikitext2", args.eval_seq_len, args.max_windows, batch_size=args.batch_size), progress)
    r = res.report
    ours_wall = sum(v for k, v in r["timings_s"].items() if "perplexity" not in k)
    if not oneshot_first:
        their_wall, violations = theirs_arm()
    identical = same_tensors(ours_dir, theirs_dir)
    if identical:  # the same stored tensors score the same: no second evaluation
        theirs_ppl, windows = r["ppl_after"]["ppl"], r["ppl_after"].get("windows")
    else:
        model = load_checkpoint(theirs_dir, device)
        text = load_eval_text("wikitext2", AutoTokenizer.from_pretrained(theirs_dir))
        theirs = _ppl(model, text, args.eval_seq_len, args.max_windows, progress, f"oneshot {name}")
        theirs_ppl, windows = theirs.ppl, theirs.windows
        del model
    shutil.rmtree(work, ignore_errors=True)
    return {
        "recipe": name, "seed": seed, "bits_per_weight": r["bits_per_weight"], "ppl_original": r["ppl_before"]["ppl"],
        "ppl_compress": r["ppl_after"]["ppl"], "ppl_oneshot": theirs_ppl, "windows": windows, "identical_tensors": identical,
        "wall_compress_s": round(ours_wall, 1), "wall_oneshot_s": round(their_wall, 1),
        "timings_compress_s": r["timings_s"],
        "calibration_tokens_compress": (r.get("calibration") or {}).get("tokens"),
        "oneshot_24_violations": violations, "oneshot_data": args.oneshot_data, "first_arm": "oneshot" if oneshot_first else "compress",
        "compress_24_refilled": (r.get("sparsity") or {}).get("refilled_by_later_stages"),
        "device": r.get("device"), "gpu": versions().get("gpu"),
    }


def same_tensors(a: Path, b: Path) -> bool:
    """Both checkpoints store exactly the same model tensors (names, dtypes, shapes, bytes); kernel packs aside."""
    from safetensors import safe_open

    from compress.checkpoint import _stored_tensors

    ia, ib = _stored_tensors(a), _stored_tensors(b)  # tensor name -> file, the loader's own index
    if not ia or ia.keys() != ib.keys():
        return False
    for k in ia:  # one pair at a time: no whole model held twice
        with safe_open(ia[k], "pt") as fa, safe_open(ib[k], "pt") as fb:
            x, y = fa.get_tensor(k), fb.get_tensor(k)
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            return False
    return True


def render(doc: dict) -> str:
    """recipes.md from recipes.json (written after every run, so a cut run still has its table). With
    several seeds a recipe gets one row per seed and a mean row; wall ratio = sum(compress) / sum(oneshot), and
    the ratio of the two arms' median runs beside it."""
    import statistics

    args, rows, v = doc["args"], doc["rows"], doc["versions"]
    seeds = sorted({x.get("seed", 0) for x in rows})
    lines = [
        f"Model `{args['model']}`, device {v.get('gpu', 'cpu')} (torch {v['torch']}, llmcompressor {v['llmcompressor']}); "
        f"calibration c4 sample, {args['num_samples']} x {args['seq_len']} tokens, seeds {', '.join(map(str, seeds))}; "
        f"perplexity WikiText-2 raw test, seq-len {args['eval_seq_len']}, non-overlapping windows "
        f"({rows[0]['windows'] if rows else 0} windows).",
        "",
        "| recipe | seed | bits/weight | PPL compress | PPL oneshot | compress - oneshot | wall compress (s) | wall oneshot (s) | wall ratio | 2:4 after oneshot | same tensors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def sparse(x):
        n = x.get("oneshot_24_violations")
        return "-" if n is None else ("kept" if n == 0 else f"broken ({n} groups)")

    def same(x):
        return {True: "yes", False: "no"}.get(x.get("identical_tensors"), "-")

    by_recipe: dict[str, list[dict]] = {}
    for x in rows:
        by_recipe.setdefault(x["recipe"], []).append(x)
    for name, group in by_recipe.items():
        for x in group:
            lines.append(
                f"| {name} | {x.get('seed', 0)} | {x['bits_per_weight']:.2f} | {x['ppl_compress']:.3f} | {x['ppl_oneshot']:.3f} | "
                f"{x['ppl_compress'] - x['ppl_oneshot']:+.3f} | {x['wall_compress_s']} | {x['wall_oneshot_s']} | "
                f"{x['wall_compress_s'] / x['wall_oneshot_s']:.2f} | {sparse(x)} | {same(x)} |"
            )
        if len(group) > 1:
            ours = [x["ppl_compress"] for x in group]
            theirs = [x["ppl_oneshot"] for x in group]
            wo, wt = sum(x["wall_compress_s"] for x in group), sum(x["wall_oneshot_s"] for x in group)
            # a stalled run on a shared machine moves a sum; the ratio of medians shows the typical run
            med_ratio = statistics.median(x["wall_compress_s"] for x in group) / statistics.median(x["wall_oneshot_s"] for x in group)
            lines.append(
                f"| **{name} mean ± std** | {len(group)} seeds | {group[0]['bits_per_weight']:.2f} | "
                f"**{statistics.mean(ours):.3f} ± {statistics.stdev(ours):.3f}** | "
                f"**{statistics.mean(theirs):.3f} ± {statistics.stdev(theirs):.3f}** | "
                f"**{statistics.mean(ours) - statistics.mean(theirs):+.3f}** | {wo:.1f} | {wt:.1f} | {wo / wt:.2f} "
                f"(of medians: {med_ratio:.2f}) | | |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
