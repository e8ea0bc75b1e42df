"""Does the way calibration windows are cut change the compressed model's perplexity? Runs one recipe through
`compress run` once per (window layout, seed) and prints/writes the perplexities (layouts: calibration/sampling.py).

    python bench/calibration_layouts.py --model /tmp/smol-hf --recipe w4a16_gptq --seeds 0 1 2 --out DIR
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

import yaml


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--recipe", default="w4a16_gptq")
    ap.add_argument("--layouts", nargs="*", default=["stream", "document_start"],
                    help="LAYOUT or LAYOUT:BATCH_SIZE (calibration.window_layout / calibration.batch_size)")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--max-windows", type=int, default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()

    from compress.pipeline import RunOptions, run
    from compress.progress import Progress
    from compress.recipe import resolve_recipe_path

    args.out.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load(resolve_recipe_path(args.recipe).read_text())
    rows = []
    for arm in args.layouts:
        layout, _, batch = arm.partition(":")
        recipe = json.loads(json.dumps(base))
        cal = recipe.setdefault("compress", {}).setdefault("calibration", {})
        cal["window_layout"] = layout
        if batch:
            cal["batch_size"] = int(batch)
        path = args.out / f"{args.recipe}__{layout}{'_b' + batch if batch else ''}.yaml"
        path.write_text(yaml.safe_dump(recipe, sort_keys=False))
        for seed in args.seeds:
            ckpt = args.out / "ckpt"
            r = run(RunOptions(str(path), args.model, "c4", 128, 512, ckpt, seed, args.device, True, "wikitext2", 2048,
                               args.max_windows), Progress(enabled=False)).report
            shutil.rmtree(ckpt, ignore_errors=True)
            rows.append({"layout": arm, "seed": seed, "ppl": r["ppl_after"]["ppl"], "ppl_original": r["ppl_before"]["ppl"],
                         "calibration": r["calibration"], "timings_s": r["timings_s"]})
            print(f"{arm:15s} seed {seed}: ppl {rows[-1]['ppl']:.3f}", flush=True)
            (args.out / "layouts.json").write_text(json.dumps({"recipe": args.recipe, "rows": rows}, indent=2, default=str))
    for arm in args.layouts:
        ppl = [r["ppl"] for r in rows if r["layout"] == arm]
        sd = statistics.stdev(ppl) if len(ppl) > 1 else 0.0
        print(f"{arm:15s} mean {statistics.mean(ppl):.3f} +- {sd:.3f} over seeds {args.seeds}")


if __name__ == "__main__":
    main()
