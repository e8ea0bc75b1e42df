"""Read a checkpoint's `quantization_config` into one `LayerSpec` per Linear layer it compresses.

Two families of checkpoints:
- compressed-tensors (`quant_method: "compressed-tensors"`): `config_groups` with `targets`, `ignore`
  and a `format` ("pack-quantized", "int-quantized", "float-quantized", "naive-quantized"); the
  weight/activation arguments of a group decide the runtime format key (w4a16, w8a16, w8a8, fp8-dynamic).
- the project's own (`quant_method: "compress"`): a `format` ("compress.sparse24", "compress.vptq",
  "compress.w4a16.<kernel>"), a `version`, and per-layer metadata under `layers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch.nn as nn

from compress.errors import CompressError


@dataclass(frozen=True)
class LayerSpec:
    """What the checkpoint says about one compressed Linear layer.

    Args:
        name: module path in the model, e.g. "model.layers.0.self_attn.q_proj".
        format: registry key of the runtime class that runs it.
        in_features, out_features: the dense weight's shape is (out_features, in_features).
        bias: whether the layer has a bias (stored densely under "<name>.bias").
        args: format arguments (bits, group size, symmetry, codebook sizes ...), straight from the config.
    """

    name: str
    format: str
    in_features: int
    out_features: int
    bias: bool = False
    args: Mapping[str, Any] = field(default_factory=dict)


def plan_layers(
    qcfg: Mapping[str, Any] | None, linears: Mapping[str, nn.Linear], compress_meta: Mapping[str, Any] | None = None
) -> dict[str, LayerSpec]:
    """Map every compressed Linear of the model (by module path) to its LayerSpec; dense layers are absent.

    `compress_meta` is config.json["compress"]; when it lists a compress.sparse24 pack, the packed
    layers run the 2:4 format instead of their compressed-tensors one.
    """
    plan = _plan_quant(qcfg, linears)
    for name, args in (int4_pack(compress_meta) or {}).get("layers", {}).items():
        # `compress run --pack w4a16`: the int4 layers are stored again, already in the kernel's
        # layout, so they load with no repacking (the compressed-tensors copy is for other tools).
        base = plan.get(name)
        if name not in linears or base is None or base.format != "compressed-tensors.w4a16":
            raise CompressError(f"w4a16 pack lists layer {name!r}, which is not an int4 layer of this checkpoint")
        plan[name] = LayerSpec(name, "compress.int4", base.in_features, base.out_features, base.bias,
                               {"group_size": int(args["group_size"]), "symmetric": bool(args["symmetric"])})
    pack = sparse24_pack(compress_meta)
    for name in pack.get("layers", []) if pack else []:
        if name not in linears:
            raise CompressError(f"sparse24 pack lists layer {name!r}, which is not a Linear of this architecture")
        base = plan.get(name)
        # The 2:4 kernels take fp16/bf16 values, or int8 values with per-channel scales on W8A8 (quantized) or
        # W8A16 (as they are) activations; other schemes (grouped or asymmetric int8, int4) keep their
        # compressed-tensors path.
        if base is None or base.format == "compressed-tensors.w8a8" or _sparse24_w8a16(base):
            mod = linears[name]
            args = {"version": pack.get("version"), "base_format": base.format if base else "dense"}
            plan[name] = LayerSpec(name, "compress.sparse24", mod.in_features, mod.out_features, mod.bias is not None, args)
    return plan


def _sparse24_w8a16(base: LayerSpec) -> bool:
    """A weight-only int8 layer the 2:4 W8A16 kernel takes: symmetric, one scale per output channel."""
    return (base.format == "compressed-tensors.w8a16" and base.args.get("strategy") == "channel"
            and base.args.get("symmetric", True))


def sparse24_pack(compress_meta: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The compress.sparse24 pack description written by `compress run --pack sparse24`, if any."""
    return _checked_pack(((compress_meta or {}).get("sparsity") or {}).get("packed"), "sparse", "compress.sparse24")


def int4_pack(compress_meta: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The compress.int4 pack written by `compress run --pack w4a16`, if any."""
    return _checked_pack(((compress_meta or {}).get("packs") or {}).get("w4a16"), "w4a16", "compress.int4")


def _checked_pack(pack: Mapping[str, Any] | None, label: str, fmt: str) -> Mapping[str, Any] | None:
    """A kernel pack's description, if present and in the one version this runtime reads."""
    if not pack:
        return None
    if pack.get("format") != fmt or int(pack.get("version", 0)) != 1:
        raise CompressError(
            f"{label} pack format {pack.get('format')!r} version {pack.get('version')!r} is not supported; "
            f"compress.runtime reads {fmt} version 1"
        )
    return pack


def packed_files(cfg: Mapping[str, Any]) -> list[str]:
    """Extra safetensors files of a checkpoint (beside the model's own), named in config.json."""
    packs = [sparse24_pack(cfg.get("compress")), int4_pack(cfg.get("compress"))]
    return [p["file"] for p in packs if p and p.get("file")]


def _plan_quant(qcfg: Mapping[str, Any] | None, linears: Mapping[str, nn.Linear]) -> dict[str, LayerSpec]:
    if not qcfg:
        return {}
    method = qcfg.get("quant_method")
    if method == "compressed-tensors":
        return _plan_compressed_tensors(qcfg, linears)
    if method == "compress":
        return _plan_compress(qcfg, linears)
    raise CompressError(
        f"quantization_config.quant_method={method!r} is not supported by compress.runtime; "
        "expected 'compressed-tensors' or 'compress' (re-export the checkpoint with `compress run`)"
    )


# ---- compressed-tensors ---------------------------------------------------------------------------


def _matches(name: str, module: nn.Module, target: str) -> bool:
    """compressed-tensors target semantics: "re:<regex>" on the module path, a class name, or an exact path."""
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target == type(module).__name__ or target == name


def ct_format_key(group: Mapping[str, Any], fmt: str | None) -> str:
    """Runtime format key for one compressed-tensors config group (raises for schemes we do not run)."""
    w = group.get("weights") or {}
    a = group.get("input_activations")
    fmt = group.get("format") or fmt
    bits, wtype = w.get("num_bits"), w.get("type")
    where = f"config group with format={fmt!r}, weights={{num_bits: {bits}, type: {wtype!r}}}"
    if group.get("output_activations"):
        raise CompressError(f"{where}: output-activation quantization is not supported by compress.runtime")
    if w.get("strategy") not in ("group", "channel"):
        raise CompressError(
            f"{where}: weight strategy {w.get('strategy')!r} is not supported; use 'group' or 'channel'"
        )
    if a is not None:
        if not a.get("dynamic") or a.get("strategy") != "token" or not a.get("symmetric", True):
            raise CompressError(
                f"{where}: only dynamic symmetric per-token activation quantization is supported, got "
                f"input_activations={{dynamic: {a.get('dynamic')}, strategy: {a.get('strategy')!r}}}; "
                "use a *_dynamic / W8A8 scheme"
            )
        if wtype == "int" and bits == 8 and a.get("type") == "int" and a.get("num_bits") == 8:
            if w.get("strategy") != "channel" or not w.get("symmetric", True):
                raise CompressError(f"{where}: W8A8 needs symmetric per-channel weights")
            return "compressed-tensors.w8a8"
        if wtype == "float" and bits == 8 and a.get("type") == "float" and a.get("num_bits") == 8:
            if w.get("strategy") != "channel":
                raise CompressError(f"{where}: FP8 dynamic needs per-channel weight scales")
            return "compressed-tensors.fp8-dynamic"
        raise CompressError(f"{where}: activation scheme {a.get('type')}{a.get('num_bits')} is not supported")
    if wtype == "int" and bits == 4 and fmt == "pack-quantized":
        return "compressed-tensors.w4a16"
    if wtype == "int" and bits == 8 and fmt in ("pack-quantized", "int-quantized", "naive-quantized"):
        return "compressed-tensors.w8a16"
    raise CompressError(f"{where}: weight-only scheme is not supported; supported: int4 pack-quantized, int8")


def _plan_compressed_tensors(qcfg: Mapping[str, Any], linears: Mapping[str, nn.Linear]) -> dict[str, LayerSpec]:
    status = qcfg.get("quantization_status")
    if status not in (None, "compressed"):
        raise CompressError(
            f"compressed-tensors checkpoint has quantization_status={status!r}; save it with "
            "save_compressed=True (compress run does) so that the weights are stored compressed"
        )
    ignore = list(qcfg.get("ignore") or [])
    groups = qcfg.get("config_groups") or {}
    plan: dict[str, LayerSpec] = {}
    for name, mod in linears.items():
        if any(_matches(name, mod, t) for t in ignore):
            continue
        for gname, group in groups.items():
            if any(_matches(name, mod, t) for t in group.get("targets") or []):
                key = ct_format_key(group, qcfg.get("format"))
                args = dict(group.get("weights") or {})
                args["input_activations"] = group.get("input_activations")
                plan[name] = LayerSpec(name, key, mod.in_features, mod.out_features, mod.bias is not None, args)
                break
    return plan


# ---- the project's own formats --------------------------------------------------------------------


def _plan_compress(qcfg: Mapping[str, Any], linears: Mapping[str, nn.Linear]) -> dict[str, LayerSpec]:
    fmt = qcfg.get("format")
    if not isinstance(fmt, str) or not fmt.startswith("compress."):
        raise CompressError(
            f"quantization_config.format={fmt!r} is not a compress format; expected e.g. 'compress.sparse24', "
            "'compress.vptq' or 'compress.w4a16.<kernel>'"
        )
    layers = qcfg.get("layers")
    if not isinstance(layers, Mapping) or not layers:
        raise CompressError(f"{fmt} checkpoint: quantization_config.layers is missing or empty; re-export it")
    shared = {k: v for k, v in qcfg.items() if k not in ("layers", "quant_method")}
    plan: dict[str, LayerSpec] = {}
    for name, meta in layers.items():
        if name not in linears:
            raise CompressError(
                f"{fmt} checkpoint lists layer {name!r}, which is not a Linear of this architecture; "
                "the config.json and the weights do not belong together"
            )
        mod = linears[name]
        args = {**shared, **(meta or {})}
        plan[name] = LayerSpec(name, args.get("format", fmt), mod.in_features, mod.out_features, mod.bias is not None, args)
    return plan
