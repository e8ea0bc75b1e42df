"""Save a compressed model as a Hugging Face folder, and load any checkpoint format we write.

Formats written:
- compressed-tensors (W8A8, W8A16, W4A16, FP8; 2:4 recipes store the zeros): loads with plain
  `transformers.AutoModelForCausalLM.from_pretrained(dir)` and with vLLM.
- dense (the `original` recipe): plain safetensors in 16-bit.
- `compress.sparse24` beside it (export.pack: [sparse24]): the 2:4 layers packed as values + metadata
  in `sparse24.safetensors`, read back bit-exactly; format and version in config.json["compress"].
- `compress.vptq` (quant_method "compress"): written and read by `compress.vptq.checkpoint`.
Loading dispatches on config.json through a registry keyed by format name.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

from compress import __version__
from compress.errors import CompressError

SPARSE24_FILE = "sparse24.safetensors"
INT4_FILE = "w4a16.safetensors"
PACK_FILES = (SPARSE24_FILE, INT4_FILE)  # kernel packs beside the model's own weights


def read_config(folder: Path) -> dict:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise CompressError(f"{folder} has no config.json: give a checkpoint folder written by compress or a HF model folder")
    return json.loads(path.read_text())


def checkpoint_format(config: dict) -> str:
    qc = config.get("quantization_config") or {}
    if qc.get("quant_method") == "compress":
        return qc.get("format", "compress.unknown")
    if qc.get("quant_method") == "compressed-tensors":
        return "compressed-tensors"
    if qc:
        return str(qc.get("quant_method"))
    return "dense"


def cast_unquantized(model, dtype: torch.dtype) -> None:
    """Cast every parameter that is not a quantized weight (or its scale/zero point) to `dtype`.

    Quantized Linear weights stay in the precision they were calibrated in, so compression at save
    time recovers their integer values exactly (bf16 rounding could move them by one step)."""
    for module in model.modules():
        quantized = getattr(module, "quantization_scheme", None) is not None
        for name, p in list(module.named_parameters(recurse=False)):
            if quantized and (name == "weight" or name.startswith("weight_")):
                continue
            if p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)
        for name, b in list(module.named_buffers(recurse=False)):
            if b.is_floating_point() and b.dtype != dtype and not quantized:
                setattr(module, name, b.to(dtype))


def save_checkpoint(model, tokenizer, folder: Path, save_dtype: torch.dtype, compress_meta: dict, compressed: bool) -> None:
    cast_unquantized(model, save_dtype)
    if compressed:
        model.save_pretrained(folder, save_compressed=True)
    else:
        model.to(save_dtype).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = read_config(folder)
    config["dtype"] = str(save_dtype).replace("torch.", "")
    config["compress"] = {"tool": "compress", "tool_version": __version__, **compress_meta}
    (Path(folder) / "config.json").write_text(json.dumps(config, indent=2, sort_keys=False) + "\n")


def write_sparse24_pack(folder: Path, layers: list[str]) -> dict:
    """Pack the stored weights of `layers` (as compressed-tensors wrote them) into our 2:4 format."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from compress.packing.sparse24 import FORMAT, VERSION, pack_sparse24

    tensors: dict[str, torch.Tensor] = {}
    stored = _stored_tensors(folder)
    for layer in layers:
        w = stored_weight(folder, layer, stored)
        with safe_open(stored[_weight_key(layer, stored)], "pt") as f:
            for extra in ("weight_scale", "weight_zero_point"):
                if f"{layer}.{extra}" in f.keys():
                    tensors[f"{layer}.{extra}"] = f.get_tensor(f"{layer}.{extra}")
        packed = pack_sparse24(w)
        tensors[f"{layer}.values"] = packed["values"].contiguous()
        tensors[f"{layer}.meta"] = packed["meta"].contiguous()
    save_file(tensors, str(Path(folder) / SPARSE24_FILE), metadata={"format": FORMAT, "version": str(VERSION)})
    return {"format": FORMAT, "version": VERSION, "file": SPARSE24_FILE, "layers": layers}


def _weight_key(layer: str, stored: dict[str, str]) -> str:
    for key in (f"{layer}.weight", f"{layer}.weight_packed"):
        if key in stored:
            return key
    raise CompressError(f"layer {layer} has no stored weight in the checkpoint: it is corrupt or was written by another tool")


def stored_weight(folder: Path, layer: str, stored: dict[str, str] | None = None) -> torch.Tensor:
    """The weight as stored: dense/int8/fp8 as is; compressed-tensors' `weight_packed` (int4 or int8
    packed into int32) unpacked to one integer per element (int8 tensor)."""
    from safetensors import safe_open

    stored = stored if stored is not None else _stored_tensors(folder)
    key = _weight_key(layer, stored)
    with safe_open(stored[key], "pt") as f:
        w = f.get_tensor(key)
        if key.endswith("weight_packed"):
            from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

            shape = torch.Size(f.get_tensor(f"{layer}.weight_shape").tolist())
            bits = round(32 * w.shape[1] / shape[1])  # int32 columns = ceil(K * bits / 32)
            w = unpack_from_int32(w, bits, shape).to(torch.int8)
    return w


def _stored_tensors(folder: Path) -> dict[str, str]:
    from safetensors import safe_open

    index = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        if f.name in PACK_FILES:
            continue
        with safe_open(str(f), "pt") as sf:
            for k in sf.keys():
                index[k] = str(f)
    return index


def verify_sparse24_pack(folder: Path) -> int:
    """Unpack every layer of sparse24.safetensors and compare with the stored dense weight, bit-exactly.
    Returns the number of layers checked."""
    from safetensors import safe_open

    from compress.packing.sparse24 import unpack_sparse24

    stored = _stored_tensors(folder)
    layers = read_config(folder).get("compress", {}).get("sparsity", {}).get("packed", {}).get("layers", [])
    with safe_open(str(Path(folder) / SPARSE24_FILE), "pt") as f:
        for layer in layers:
            dense = stored_weight(folder, layer, stored)
            back = unpack_sparse24(f.get_tensor(f"{layer}.values"), f.get_tensor(f"{layer}.meta"), tuple(dense.shape))
            if not torch.equal(back, dense):
                raise CompressError(f"{folder}: sparse24 pack of {layer} does not unpack to the stored weight: the checkpoint is corrupt")
    return len(layers)


def int4_layers(folder: Path) -> dict[str, dict]:
    """Every int4 group-quantized layer of a compressed-tensors checkpoint -> {group_size, symmetric}."""
    from compress.runtime.loader import build_skeleton, linear_modules
    from compress.runtime.spec import plan_layers

    config = read_config(folder)
    qcfg = config.get("quantization_config")
    if not qcfg or qcfg.get("quant_method") != "compressed-tensors":
        return {}
    plan = plan_layers(qcfg, linear_modules(build_skeleton(config, torch.bfloat16)))
    return {
        name: {"group_size": int(spec.args["group_size"]), "symmetric": bool(spec.args.get("symmetric", True))}
        for name, spec in plan.items()
        if spec.format == "compressed-tensors.w4a16"
    }


def write_int4_pack(folder: Path) -> dict:
    """Repack the checkpoint's int4 layers (compressed-tensors pack-quantized) into the compress.int4
    layout the W4A16 kernels read (compress/packing/int4.py), in w4a16.safetensors beside the model:
    the runtime then loads them with no repacking, while transformers and vLLM keep reading the
    standard tensors."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from compress.packing import int4 as int4_fmt

    layers = int4_layers(folder)
    unsupported = {n: a["group_size"] for n, a in layers.items() if a["group_size"] not in int4_fmt.GROUP_SIZES}
    if unsupported:
        name, g = next(iter(unsupported.items()))
        raise CompressError(
            f"--pack w4a16: layer {name} has group size {g}; the W4A16 kernel takes {int4_fmt.GROUP_SIZES}: "
            "change the recipe's group_size or drop --pack w4a16"
        )
    stored = _stored_tensors(folder)
    tensors: dict[str, torch.Tensor] = {}
    for layer, args in layers.items():
        with safe_open(stored[f"{layer}.weight_packed"], "pt") as f:
            get = lambda key: f.get_tensor(f"{layer}.{key}") if f"{layer}.{key}" in f.keys() else None  # noqa: E731
            packed = int4_fmt.from_compressed_tensors(
                get("weight_packed"), get("weight_scale"), get("weight_shape"),
                None if args["symmetric"] else get("weight_zero_point"), group_size=args["group_size"],
            )
        for key, t in packed.items():
            tensors[f"{layer}.{key}"] = t.contiguous()
    save_file(tensors, str(Path(folder) / INT4_FILE), metadata={"format": int4_fmt.FORMAT, "version": str(int4_fmt.VERSION)})
    return {"format": int4_fmt.FORMAT, "version": int4_fmt.VERSION, "file": INT4_FILE, "layers": layers}


def verify_int4_pack(folder: Path) -> int:
    """Unpack every layer of w4a16.safetensors and compare its integers, scales and zero points with the
    compressed-tensors tensors they came from, exactly. Returns the number of layers checked."""
    from safetensors import safe_open

    from compress.packing import int4 as int4_fmt

    stored = _stored_tensors(folder)
    layers = read_config(folder).get("compress", {}).get("packs", {}).get("w4a16", {}).get("layers", {})
    with safe_open(str(Path(folder) / INT4_FILE), "pt") as f:
        for layer, args in layers.items():
            q = stored_weight(folder, layer, stored).to(torch.int16)  # signed q in [-8, 7]
            u = int4_fmt.unpack_int4(f.get_tensor(f"{layer}.qweight"), q.shape[1]).to(torch.int16)
            with safe_open(stored[f"{layer}.weight_scale"], "pt") as g:
                scale = g.get_tensor(f"{layer}.weight_scale")
            ok = torch.equal(u, q + 8) and torch.equal(f.get_tensor(f"{layer}.scales"), scale.t())
            if not args["symmetric"]:
                from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

                with safe_open(stored[f"{layer}.weight_zero_point"], "pt") as g:
                    zp = g.get_tensor(f"{layer}.weight_zero_point")
                zp = unpack_from_int32(zp, 4, torch.Size([q.shape[0], scale.shape[1]]), packed_dim=0)
                ok = ok and torch.equal(f.get_tensor(f"{layer}.zeros").to(torch.int16), zp.t().to(torch.int16) + 8)
            if not ok:
                raise CompressError(f"{folder}: w4a16 pack of {layer} does not match the stored int4 weights: the checkpoint is corrupt")
    return len(layers)


# ---- loading -------------------------------------------------------------------------------------

Loader = Callable[[Path, str, dict], object]
LOADERS: dict[str, Loader] = {}


def register_loader(fmt: str):
    def deco(fn: Loader) -> Loader:
        LOADERS[fmt] = fn
        return fn

    return deco


@register_loader("dense")
@register_loader("compressed-tensors")
def _load_hf(folder: Path, device: str, config: dict):
    """transformers decompresses compressed-tensors weights itself: no project code involved."""
    from transformers import AutoModelForCausalLM

    from compress.model_source import pick_dtype

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=pick_dtype(device))
    return model.eval().to(device)


@register_loader("compress.vptq")
def _load_vptq(folder: Path, device: str, config: dict):
    from compress.vptq import checkpoint as vptq_checkpoint

    return vptq_checkpoint.load(folder, device=device)


def load_checkpoint(folder: Path, device: str):
    """A model ready for evaluation (weights dequantized where needed) from any format we write."""
    config = read_config(folder)
    fmt = checkpoint_format(config)
    loader = LOADERS.get(fmt)
    if loader is None:
        raise CompressError(f"{folder}: checkpoint format '{fmt}' is not one compress reads ({', '.join(sorted(LOADERS))})")
    return loader(Path(folder), device, config)
