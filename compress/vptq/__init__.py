"""VPTQ: vector post-training quantization with codebooks (fitting, format, pipeline stage, checkpoint).

The names below load on first use (PEP 562): the runtime imports only `compress.vptq.format` to serve a
checkpoint, and a serving machine need not have the fitting side's dependencies (pydantic for the config).
"""

import importlib

_EXPORTS = {
    "PRESETS": "config", "VPTQConfig": "config", "VPTQModifierConfig": "config", "preset": "config",
    "fit_vptq": "fit",
    "VPTQResult": "stage", "apply_vptq": "stage",
    "FORMAT": "format", "VERSION": "format", "VQWeight": "format", "dequantize": "format",
    "pack_indices": "format", "unpack_indices": "format",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'compress.vptq' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"compress.vptq.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
