"""`compress run`: recipe -> calibration data -> algorithms -> checkpoint -> perplexity gate.

The order is chosen so that every cheap check runs before any expensive one: recipe, output folder,
model config and layer shapes, calibration and evaluation data; only then the model weights.
"""
from __future__ import annotations

import contextlib
import gc
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from compress import compat  # noqa: F401 - sets llmcompressor's log level before it is imported
from compress import interrupts
from compress.atomic import atomic_folder, check_output
from compress.baseline_cache import cached_perplexity
from compress.checkpoint import load_checkpoint, save_checkpoint, verify_sparse24_pack, write_sparse24_pack
from compress.errors import CompressError
from compress.evaluation import EvalText, load_eval_text
from compress.model_source import load_config, load_model, load_tokenizer, resolve_device, resolve_model
from compress.preflight import preflight, quantizes_int4
from compress.progress import Progress
from compress.recipe import CALIBRATION_MODIFIERS, Recipe, load_recipe
from compress.sizes import checkpoint_bytes, model_size_16bit
from compress.sparse_gptq import gptq_keeps_24_masks
from compress.sparsity import capture_masks, check_24, reapply_masks


@dataclass
class RunOptions:
    recipe: str
    model: str | None = None
    dataset: str | None = None
    num_samples: int | None = None
    seq_len: int | None = None
    output: Path | None = None
    seed: int = 0
    device: str = "auto"
    force: bool = False
    eval_dataset: str | None = None
    eval_seq_len: int | None = None
    max_windows: int | None = None
    max_ppl_increase: float | None = None
    text_column: str | None = None
    skip_unfit_layers: bool = False
    pack: list[str] = field(default_factory=list)
    batch_size: int | str | None = None  # None: the recipe's, else 1; "auto": ~8192 tokens per pass


@dataclass
class RunResult:
    report: dict
    output: Path
    passed: bool


KERNEL_PACKS = ("sparse24", "w4a16")  # --pack names: the kernel whose layout is written beside the checkpoint


class GateFailed(CompressError):
    """The compressed model's perplexity rose more than allowed."""


def default_output(recipe: Recipe, model_spec: str | None) -> Path:
    model_name = Path(model_spec).stem if model_spec else "smollm2-135m"
    return Path("out") / f"{model_name.replace('/', '--')}-{recipe.name}"


def run(opts: RunOptions, progress: Progress | None = None) -> RunResult:
    progress = progress or Progress(enabled=False)
    compat.quiet_third_party()
    t_start = time.perf_counter()
    timings: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(name: str):
        # A Ctrl-C that Python swallowed in a finalizer (compress.interrupts) stops the run here at the latest.
        interrupts.check()
        t = time.perf_counter()
        with progress.phase(name):
            yield
        interrupts.check()
        timings[name] = round(time.perf_counter() - t, 3)

    recipe = load_recipe(opts.recipe)
    cal = recipe.compress.calibration
    val = recipe.compress.validation
    dataset = opts.dataset or cal.dataset
    num_samples = opts.num_samples if opts.num_samples is not None else cal.num_samples
    seq_len = opts.seq_len or cal.seq_len
    eval_dataset = opts.eval_dataset or val.eval_dataset
    eval_seq_len = opts.eval_seq_len or val.seq_len
    max_windows = opts.max_windows if opts.max_windows is not None else val.max_windows
    gate = opts.max_ppl_increase if opts.max_ppl_increase is not None else val.max_ppl_increase
    pack = list(dict.fromkeys([*recipe.compress.export.pack, *opts.pack]))
    output = opts.output or default_output(recipe, opts.model)
    check_output(output, opts.force)
    if num_samples == 0 and recipe.needs_calibration:
        needy = [n for n in recipe.modifier_names if n in CALIBRATION_MODIFIERS or n == "VPTQModifier"]
        raise CompressError(
            f"--num-samples 0 with {', '.join(needy)}: these need calibration data (data-free they write a "
            "NaN or garbage model); give --num-samples >= 1"
        )
    unknown_pack = [p for p in pack if p not in KERNEL_PACKS]
    if unknown_pack:
        raise CompressError(f"--pack {unknown_pack[0]}: unknown packing; use one of: {', '.join(KERNEL_PACKS)}")
    if "w4a16" in pack and not quantizes_int4(recipe):
        raise CompressError(
            f"--pack w4a16 but recipe {recipe.name} has no int4 weight quantization: drop the packing or use a "
            "W4A16 recipe (e.g. w4a16_gptq)"
        )
    if "sparse24" in pack and not any(str(m.args.get("mask_structure")) == "2:4" for m in recipe.modifiers):
        raise CompressError(
            f"--pack sparse24 but recipe {recipe.name} has no 2:4 sparsity stage: drop the packing or add "
            "SparseGPTModifier with mask_structure: '2:4'"
        )

    device = resolve_device(opts.device)
    src = resolve_model(opts.model)
    with phase("read config + preflight"):
        config = load_config(src)
        skipped = preflight(recipe, config, opts.skip_unfit_layers)
        if skipped:
            recipe = _ignore_layers(recipe, skipped, (getattr(config, "architectures", None) or [""])[0])
        tokenizer = load_tokenizer(src)

    with phase("prepare data"):
        eval_text = load_eval_text(eval_dataset, tokenizer)
        calib = None
        if recipe.needs_calibration:
            from calibration import build_calibration_set, load_documents

            docs = load_documents(dataset, opts.text_column or cal.text_column)
            if docs.sha256 == eval_text.sha256:
                raise CompressError(
                    f"calibration data {docs.source} is the evaluation text ({eval_dataset}): calibrate on "
                    "another dataset (e.g. --dataset c4) or evaluate on another (--eval-dataset)"
                )
            calib = build_calibration_set(docs, tokenizer, num_samples, seq_len, opts.seed,
                                          opts.batch_size if opts.batch_size is not None else cal.batch_size,
                                          layout=cal.window_layout)
            for note in calib.notes:
                progress.note(note)

    with phase("load model"):
        torch.manual_seed(opts.seed)
        model = load_model(src, device)
        source_dtype = _source_dtype(config)
        size_before = model_size_16bit(model)

    with phase("baseline perplexity"):
        ppl_before, cached = cached_perplexity(
            src, model, eval_text, eval_seq_len, max_windows, device, progress, "original"
        )

    masks: dict = {}
    sparse_stats: dict = {}
    with phase("compress"):
        if recipe.llmcompressor_dict:
            masks = _run_llmcompressor_stages(model, tokenizer, recipe, calib, seq_len, progress)
        if masks:
            refilled = reapply_masks(model, masks)
            check_24(model, masks)
            sparse_stats = {"pattern": "2:4", "layers": sorted(masks), "refilled_by_later_stages": refilled}
        vptq_meta = None
        if recipe.vptq is not None:
            vptq_meta = _run_vptq(model, recipe, calib, progress)

    compressed = bool(recipe.llmcompressor_dict) and recipe.compress.export.format == "compressed-tensors"
    report = {
        "recipe": recipe.name,
        "recipe_file": str(recipe.path),
        "model": src.spec,
        "device": device,
        "seed": opts.seed,
        "calibration": calib.record() if calib else None,
        "skipped_layers": skipped,
        "sparsity": sparse_stats or None,
        "vptq": _vptq_record(vptq_meta) if vptq_meta is not None else None,
    }
    with atomic_folder(output, opts.force) as tmp:
        with phase("save checkpoint"):
            meta = {"recipe": recipe.name, "seed": opts.seed}
            if sparse_stats:
                meta["sparsity"] = {"pattern": "2:4", "layers": sparse_stats["layers"]}
            if vptq_meta is not None:
                from compress.vptq import checkpoint as vptq_checkpoint

                vptq_checkpoint.save(model, tokenizer, tmp, vptq_meta, source_dtype, meta)
            else:
                save_checkpoint(model, tokenizer, tmp, source_dtype, meta, compressed)
            if "sparse24" in pack:
                _add_sparse24(tmp, sparse_stats["layers"])
            if "w4a16" in pack:
                _add_int4_pack(tmp)
            _write_recipe_files(tmp, recipe)
        del model
        gc.collect()
        with phase("perplexity of the checkpoint"):
            reloaded = load_checkpoint(tmp, device)
            ppl_after = _ppl(reloaded, eval_text, eval_seq_len, max_windows, progress, "compressed")
            del reloaded
        change = 100.0 * (ppl_after.ppl - ppl_before.ppl) / ppl_before.ppl
        passed = gate is None or change <= gate
        size_after = checkpoint_bytes(tmp)
        report.update(
            {
                "size_before_bytes": size_before,
                "size_after_bytes": size_after,
                "compression_ratio": round(size_before / size_after, 3),
                "bits_per_weight": _bits_per_weight(tmp),
                "ppl_before": ppl_before.record() | {"from_cache": cached},
                "ppl_after": ppl_after.record(),
                "ppl_change_percent": round(change, 3),
                "gate_max_ppl_increase_percent": gate,
                "gate_passed": passed,
                "timings_s": timings,
                "wall_time_s": round(time.perf_counter() - t_start, 2),
                "peak_memory": _peak_memory(device),
            }
        )
        from compress.report import write_report

        write_report(tmp, report)
        if not passed:
            rejected = output.parent / f"{output.name}-rejected"
            import shutil

            shutil.rmtree(rejected, ignore_errors=True)
            tmp.rename(rejected)
            tmp.mkdir()  # atomic_folder removes it again: nothing lands at `output`
            raise GateFailed(
                f"perplexity rose {change:.2f}% ({ppl_before.ppl:.3f} -> {ppl_after.ppl:.3f}), over the "
                f"allowed {gate}%: checkpoint kept at {rejected}, not at {output}; raise --max-ppl-increase "
                "or change the recipe"
            )
    report["output"] = str(output)
    return RunResult(report, output, passed)


def _source_dtype(config) -> torch.dtype:
    # transformers 5 keeps the old `torch_dtype` only as a deprecated alias of `dtype` (reading it warns)
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    return dtype if dtype in (torch.float16, torch.bfloat16) else torch.bfloat16


def _ignore_layers(recipe: Recipe, layers: list[str], architecture: str) -> Recipe:
    """Add exact layer names to every llmcompressor modifier's `ignore` list.

    AWQ has no `ignore`: it divides by the number of quantized balance layers of each mapping, so a
    mapping whose balance layers are all left unquantized crashes it (ZeroDivisionError, measured).
    We hand it the architecture's mappings minus those that balance a skipped layer."""
    for stage in recipe.llmcompressor_dict.values():
        if not isinstance(stage, dict):
            continue
        for group in stage.values():
            for name, args in group.items():
                if name == "SmoothQuantModifier":
                    continue  # it only rescales; skipping happens at quantization
                if name == "AWQModifier":
                    args["mappings"] = _awq_mappings_without(args.get("mappings"), layers, architecture)
                    continue
                args["ignore"] = list(dict.fromkeys([*args.get("ignore", []), *layers]))
    for spec in recipe.modifiers:
        if spec.name == "VPTQModifier":
            spec.args["ignore"] = list(dict.fromkeys([*spec.args.get("ignore", []), *layers]))
    return recipe


def _awq_mappings_without(mappings, layers: list[str], architecture: str) -> list[dict]:
    import re

    if mappings is None:
        from llmcompressor.modifiers.transform.awq.mappings import AWQ_MAPPING_REGISTRY, default_mappings

        mappings = [
            {"smooth_layer": m.smooth_layer, "balance_layers": list(m.balance_layers)}
            for m in AWQ_MAPPING_REGISTRY.get(architecture, default_mappings)
        ]

    def hits(pattern: str) -> bool:
        if pattern.startswith("re:"):
            return any(re.match(pattern[3:], name) for name in layers)
        return pattern in layers

    return [m for m in mappings if not any(hits(p) for p in m["balance_layers"])]


def _run_llmcompressor_stages(model, tokenizer, recipe: Recipe, calib, seq_len: int, progress: Progress) -> dict:
    """One `oneshot` per stage, so the 2:4 masks can be captured between sparsity and quantization."""
    import yaml
    from llmcompressor import oneshot

    compat.patch_awq_pin_memory_on_cpu()
    masks: dict = {}
    for stage_name, stage in recipe.llmcompressor_dict.items():
        if stage_name == "args":
            continue
        one = {stage_name: stage}
        if "args" in recipe.llmcompressor_dict:
            one["args"] = recipe.llmcompressor_dict["args"]
        names = [m for g in stage.values() for m in g]
        progress.note(f"stage {stage_name}: {', '.join(names)}")
        kwargs = {}
        if calib is not None:
            # The tokenizer goes along because oneshot otherwise reloads one from the model's path,
            # which fails for GGUF models.
            kwargs = dict(dataset=calib.dataloader(), num_calibration_samples=calib.num_samples, max_seq_length=seq_len, processor=tokenizer)
        try:
            # Once a 2:4 mask exists, GPTQ quantizes the pruned weights to zero in its loop (compress.sparse_gptq).
            keep_24 = gptq_keeps_24_masks() if masks else contextlib.nullcontext()
            with compat.config_folder_for_oneshot(model), keep_24:
                oneshot(model=model, recipe=yaml.safe_dump(one, sort_keys=False), **kwargs)
        except (CompressError, KeyboardInterrupt):
            raise
        except Exception as e:
            if os.environ.get("COMPRESS_DEBUG") == "1":
                raise
            detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CompressError(
                f"llmcompressor failed in stage '{stage_name}' ({type(e).__name__}: {detail[:200]}): "
                "check the recipe against the model; COMPRESS_DEBUG=1 shows the traceback"
            ) from None
        for spec in recipe.modifiers:
            if spec.stage == stage_name and spec.name in ("SparseGPTModifier", "WandaPruningModifier"):
                masks.update(capture_masks(model, _targeted(model, spec.args)))
    return masks


def _targeted(model, args: dict) -> list[str]:
    from compressed_tensors.utils import match_named_modules

    targets = args.get("targets", ["Linear"])
    targets = [targets] if isinstance(targets, str) else targets
    if any(t.startswith("__ALL") for t in targets):
        targets = ["Linear"]
    return [n for n, m in match_named_modules(model, targets, args.get("ignore", [])) if isinstance(m, torch.nn.Linear)]


def _run_vptq(model, recipe: Recipe, calib, progress: Progress):
    from compress.vptq import VPTQModifierConfig, apply_vptq

    cfg = VPTQModifierConfig.model_validate(recipe.vptq.args)
    with progress.callback("VPTQ") as update:
        return apply_vptq(model, calib.samples, cfg, progress=update)


def _vptq_record(result) -> dict:
    """What the report says about a VPTQ stage: fit time, size, own-codebook layers, the distillation's
    held-out KL (start, best, the step kept)."""
    record = {
        "fit_seconds": round(result.fit_seconds, 2),
        "bits_per_weight": result.size_report()["bits_per_weight"],
        "own_codebooks": sorted(n for n, st in result.stats.items() if st.get("own_codebook")),
    }
    if result.finetune:
        f = result.finetune
        record["finetune"] = {k: f[k] for k in ("steps", "lr", "batch_size", "train_windows", "heldout_windows",
                                                 "train_norms", "heldout_kl_start", "heldout_kl_best", "best_step")}
    return record


def _add_sparse24(folder: Path, layers: list[str]) -> None:
    _record_pack(folder, ("sparsity", "packed"), write_sparse24_pack(folder, layers))
    verify_sparse24_pack(folder)


def _record_pack(folder: Path, where: tuple[str, str], packed: dict) -> None:
    """Describe a kernel pack in config.json["compress"][where[0]][where[1]] (where the runtime looks)."""
    import json

    cfg_path = folder / "config.json"
    config = json.loads(cfg_path.read_text())
    config["compress"].setdefault(where[0], {})[where[1]] = packed
    cfg_path.write_text(json.dumps(config, indent=2) + "\n")


def _add_int4_pack(folder: Path) -> None:
    """w4a16.safetensors beside the compressed-tensors weights, verified exactly against them."""
    from compress.checkpoint import verify_int4_pack, write_int4_pack

    _record_pack(folder, ("packs", "w4a16"), write_int4_pack(folder))
    verify_int4_pack(folder)


def _write_recipe_files(folder: Path, recipe: Recipe) -> None:
    """recipe.yaml: the llmcompressor part in plain YAML (llmcompressor's own dump has
    `!!python/tuple` tags that no safe loader reads back); compress_recipe.yaml: the file as given."""
    (folder / "recipe.yaml").write_text(recipe.llmcompressor_yaml() or "{}\n")
    (folder / "compress_recipe.yaml").write_text(recipe.text)


def _ppl(model, eval_text: EvalText, seq_len, max_windows, progress: Progress, label: str):
    from eval import perplexity

    total = min(eval_text.ids.numel() // seq_len, max_windows or 10**9)
    with progress.task(f"perplexity ({label})", total) as advance:
        return perplexity(
            model, eval_text.ids, seq_len, max_windows, lambda d, t: advance(),
            eval_text.name, eval_text.source, eval_text.sha256,
        )


def _bits_per_weight(folder: Path) -> float:
    from compress.inspect_checkpoint import inspect_checkpoint

    return inspect_checkpoint(folder)["totals"]["linear_bits_per_weight"]


def _peak_memory(device: str) -> dict:
    peak = {"cpu_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device.startswith("cuda"):
        peak["gpu_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return peak
