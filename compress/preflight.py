"""Check, before any heavy work, that every targeted layer's shape fits the recipe's schemes.

The model is built on the meta device from its config (no weights read), so this costs milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from compress.errors import CompressError
from compress.recipe import Recipe


@dataclass
class Misfit:
    layer: str
    reason: str


def meta_model(config):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def weight_schemes(recipe: Recipe):
    """(targets, ignore, weight QuantizationArgs) per config group of the recipe's quantization modifiers,
    resolved by llmcompressor itself (presets such as `scheme: W4A16` and explicit config_groups alike)."""
    from llmcompressor.modifiers import ModifierFactory

    for spec in recipe.modifiers:
        if spec.name not in ("GPTQModifier", "QuantizationModifier"):
            continue
        mod = ModifierFactory.create(spec.name, allow_registered=True, allow_experimental=True, **spec.args)
        config = mod.resolve_quantization_config()
        for scheme in config.config_groups.values():
            if scheme.weights is not None:
                yield scheme.targets, config.ignore or [], scheme.weights


def quantizes_int4(recipe: Recipe) -> bool:
    """Whether the recipe writes int4 integer weights (what `--pack w4a16` packs)."""
    return any(w.num_bits == 4 and str(getattr(w.type, "value", w.type)) == "int" for _, _, w in weight_schemes(recipe))


def _quant_groups(recipe: Recipe):
    """(targets, ignore, group_size) per grouped weight scheme in the recipe's quantization modifiers."""
    for targets, ignore, w in weight_schemes(recipe):
        if w.group_size and w.group_size > 0:
            yield targets, ignore, w.group_size


def _sparsity_groups(recipe: Recipe):
    for spec in recipe.modifiers:
        structure = spec.args.get("mask_structure")
        if spec.name in ("SparseGPTModifier", "WandaPruningModifier") and structure and structure != "unstructured":
            m = int(str(structure).split(":")[1])
            yield spec.args.get("targets", ["Linear"]), spec.args.get("ignore", []), m, structure


def find_misfits(recipe: Recipe, model) -> list[Misfit]:
    from compressed_tensors.utils import match_named_modules

    misfits: list[Misfit] = []
    for targets, ignore, group in _quant_groups(recipe):
        for name, mod in match_named_modules(model, targets, ignore):
            if isinstance(mod, torch.nn.Linear) and mod.in_features % group:
                misfits.append(Misfit(name, f"in_features={mod.in_features} not divisible by group_size={group}"))
    for targets, ignore, m, structure in _sparsity_groups(recipe):
        targets = [targets] if isinstance(targets, str) else targets
        if "__ALL_PRUNABLE__" in targets or "__ALL__" in targets:
            targets = ["Linear"]
        for name, mod in match_named_modules(model, targets, ignore):
            if isinstance(mod, torch.nn.Linear) and mod.in_features % m:
                misfits.append(Misfit(name, f"in_features={mod.in_features} not divisible by {m} ({structure} sparsity)"))
    if recipe.vptq is not None:
        misfits.extend(_vptq_misfits(recipe, model))
    return misfits


def _vptq_misfits(recipe: Recipe, model) -> list[Misfit]:
    """Vectors run along out_features, so each targeted layer's out_features must be divisible by the
    vector length (unless the config lets the stage shrink it for that layer)."""
    from compress.vptq import VPTQModifierConfig
    from compress.vptq.stage import target_linears, vector_len_for

    mod_cfg = VPTQModifierConfig.model_validate(recipe.vptq.args)
    cfg = mod_cfg.vptq()
    out = []
    for name, lin in target_linears(model, mod_cfg.targets, mod_cfg.ignore).items():
        try:
            vector_len_for(name, lin.out_features, cfg)
        except CompressError:
            out.append(Misfit(name, f"out_features={lin.out_features} not divisible by vector_len={cfg.vector_len}"))
    return out


def preflight(recipe: Recipe, config, skip_unfit: bool) -> list[str]:
    """Raise one error naming every misfit layer and the fix; with `skip_unfit`, return their names
    so the pipeline leaves them uncompressed (and says so in the report)."""
    misfits = find_misfits(recipe, meta_model(config))
    if not misfits:
        return []
    names = sorted({m.layer for m in misfits})
    if skip_unfit:
        return names
    shown = "; ".join(f"{m.layer}: {m.reason}" for m in misfits[:4])
    more = f" (+{len(misfits) - 4} more)" if len(misfits) > 4 else ""
    raise CompressError(
        f"recipe {recipe.name} does not fit {len(names)} layer(s): {shown}{more}. Fix: use a group size "
        "that divides these dims, add the layers to the recipe's `ignore`, or pass --skip-unfit-layers "
        "to leave them uncompressed"
    )
