"""`compress inspect`: per-layer format, bits, group size, sparsity and bytes of a checkpoint, read
from safetensors headers (plus the few tiny shape tensors), never the whole weights."""
from __future__ import annotations

from pathlib import Path

import torch

from compress.checkpoint import PACK_FILES, checkpoint_format, read_config

WEIGHT_KEYS = ("weight", "weight_packed", "vptq_indices")


def _headers(folder: Path) -> dict[str, tuple[str, tuple[int, ...], str]]:
    from safetensors import safe_open

    out = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        if f.name in PACK_FILES:
            continue
        with safe_open(str(f), "pt") as sf:
            for k in sf.keys():
                sl = sf.get_slice(k)
                out[k] = (sl.get_dtype(), tuple(sl.get_shape()), str(f))
    return out


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "BOOL": 1}
_DTYPE_BITS = {"I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F16": 16, "BF16": 16, "F32": 32}


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def inspect_checkpoint(folder: Path) -> dict:
    folder = Path(folder)
    config = read_config(folder)
    fmt = checkpoint_format(config)
    headers = _headers(folder)
    meta = config.get("compress", {})
    sparse_layers = set((meta.get("sparsity") or {}).get("layers", []))
    vptq_layers = (config.get("quantization_config") or {}).get("layers", {}) if fmt == "compress.vptq" else {}

    prefixes: dict[str, list[str]] = {}
    for name in headers:
        prefix, _, leaf = name.rpartition(".")
        prefixes.setdefault(prefix, []).append(leaf)

    layers, total_bytes = [], sum(_numel(s) * _DTYPE_BYTES.get(d, 4) for d, s, _ in headers.values())
    for prefix, leaves in sorted(prefixes.items()):
        key = next((k for k in WEIGHT_KEYS if k in leaves), None)
        if key is None:
            continue
        dtype, shape, file = headers[f"{prefix}.{key}"]
        if key == "weight" and len(shape) != 2:
            continue
        nbytes = sum(_numel(headers[f"{prefix}.{leaf}"][1]) * _DTYPE_BYTES.get(headers[f"{prefix}.{leaf}"][0], 4) for leaf in leaves)
        if key == "weight_packed":
            from safetensors import safe_open

            with safe_open(file, "pt") as sf:
                n, k = (int(x) for x in sf.get_tensor(f"{prefix}.weight_shape").tolist())
            bits = round(32 * shape[1] / k)  # int32 columns = ceil(K * bits / 32)
            kind = f"int{bits} (pack-quantized)"
        elif key == "vptq_indices":
            info = vptq_layers.get(prefix, {})
            n, k = info.get("shape", (0, 0))
            # index bits per weight, main + residual (codebooks and row scales are in the bytes column)
            kind = "vptq"
            bits = (info.get("index_bits", 0) + info.get("res_index_bits", 0)) / max(info.get("vector_len", 1), 1)
        else:
            n, k = shape
            kind = {"I8": "int8", "F8_E4M3": "fp8 e4m3"}.get(dtype, f"dense {dtype.lower()}")
            bits = _DTYPE_BITS.get(dtype, 16)
        group = "-"
        if "weight_scale" in leaves:
            sshape = headers[f"{prefix}.weight_scale"][1]
            cols = sshape[1] if len(sshape) == 2 else 1
            group = "channel" if cols == 1 else str(k // cols)
            if "weight_zero_point" in leaves:
                group += " asym"
        layers.append(
            {
                "layer": prefix,
                "format": kind,
                "bits": bits,
                "group_size": group,
                "sparsity": "2:4" if prefix in sparse_layers else "-",
                "shape": [n, k],
                "weights": n * k,
                "bytes": nbytes,
                "embedding": "embed" in prefix,
            }
        )
    # VPTQ codebooks shared by several layers are stored once, under no layer's name: their bytes belong to the
    # quantized Linear weights all the same (without them a k4096/r128 SmolLM2 checkpoint read 2.453 bits, not 2.489).
    shared = [name for name in headers if name.startswith("vptq_shared.")]
    if shared:
        layers.append(
            {
                "layer": "vptq_shared (codebooks shared by layers)",
                "format": "vptq codebooks",
                "bits": "-",
                "group_size": "-",
                "sparsity": "-",
                "shape": [],
                "weights": 0,
                "bytes": sum(_numel(headers[n][1]) * _DTYPE_BYTES.get(headers[n][0], 4) for n in shared),
                "embedding": False,
            }
        )
    linear = [l for l in layers if not l["embedding"]]
    lw = sum(l["weights"] for l in linear)
    lb = sum(l["bytes"] for l in linear)
    params = sum(l["weights"] for l in layers)
    return {
        "checkpoint": str(folder),
        "format": fmt,
        "layers": layers,
        "totals": {
            "tensor_bytes": total_bytes,
            "linear_weights": lw,
            "linear_bytes": lb,
            "linear_bits_per_weight": round(8 * lb / lw, 4) if lw else 0.0,
            "model_bits_per_weight": round(8 * total_bytes / params, 4) if params else 0.0,
        },
    }
