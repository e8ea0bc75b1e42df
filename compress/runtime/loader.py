"""`load(checkpoint, device, dtype)`: a transformers model whose compressed Linear layers run our kernels.

Steps: read config.json; build the architecture on the meta device (no memory, no random init); swap
every Linear that the quantization config names for the registered runtime class of its format, built
straight from the checkpoint tensors on the target device; load the remaining (dense) tensors; rebuild
non-persistent buffers (rotary frequencies); pick kernel or reference per layer, warning once per
format when the reference has to stand in.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import torch
import torch.nn as nn

from compress.errors import CompressError
from compress.runtime import kernel_bridge as kb
from compress.runtime.qlinear import QuantLinear
from compress.runtime.registry import get_format
from compress.runtime.spec import LayerSpec, packed_files, plan_layers

BACKENDS = ("auto", "kernel", "reference")


class ReferenceFallbackWarning(RuntimeWarning):
    """Some layers run the plain-torch reference instead of a kernel (slow, but the same math)."""


@dataclass
class RuntimeInfo:
    """What `load` did, attached to the model as `model.compress_runtime`."""

    checkpoint: str
    device: str
    dtype: str
    formats: dict[str, int] = field(default_factory=dict)  # format key -> layer count
    backends: dict[str, str] = field(default_factory=dict)  # format key -> "kernel" | "reference"
    fallback_reasons: dict[str, str] = field(default_factory=dict)  # format key -> why the reference runs
    synthetic: bool = False

    def summary(self) -> str:
        parts = [f"{k}: {n} layers on {self.backends.get(k, '?')}" for k, n in sorted(self.formats.items())]
        return "; ".join(parts) or "dense (no compressed layers)"


# ---- checkpoint reading ---------------------------------------------------------------------------


class LayerTensors(dict):
    """One layer's tensors by local name, plus `shared(name)` for tensors several layers use
    (VPTQ codebook scopes): those are loaded once per device and the same tensor is handed out."""

    def __init__(self, local: dict, shared):
        super().__init__(local)
        self.shared = shared


class CheckpointTensors:
    """Lazy access to a (possibly sharded) safetensors checkpoint by tensor name.

    `extra_files` are read too, after the main ones (the compress.sparse24 pack lives beside the
    compressed-tensors weights in its own file)."""

    def __init__(self, folder: Path, extra_files: Iterable[str] = ()):
        from safetensors import safe_open

        index = folder / "model.safetensors.index.json"
        extra = list(extra_files)
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in folder.glob("*.safetensors") if p.name not in extra)
            if not files:
                raise CompressError(f"{folder}: no *.safetensors file; only safetensors checkpoints can be loaded")
            weight_map = {}
        for f in extra:
            if not (folder / f).exists():
                raise CompressError(f"{folder}: config.json names {f}, which is missing; copy the whole checkpoint folder")
        self._handles = {f: safe_open(str(folder / f), framework="pt") for f in files + extra}
        if not weight_map:
            weight_map = {k: f for f in files for k in self._handles[f].keys()}
        for f in extra:  # later files win: the packed layers' tensors come from the pack
            weight_map.update({k: f for k in self._handles[f].keys()})
        self.weight_map: dict[str, str] = weight_map
        self._shared: dict[tuple[str, str], torch.Tensor] = {}

    def names(self) -> Iterable[str]:
        return self.weight_map.keys()

    def get(self, name: str) -> torch.Tensor:
        return self._handles[self.weight_map[name]].get_tensor(name)

    def shared(self, name: str, device: torch.device) -> torch.Tensor | None:
        if name not in self.weight_map:
            return None
        key = (name, str(device))
        if key not in self._shared:
            self._shared[key] = self.get(name).to(device)
        return self._shared[key]

    def layer(self, prefix: str, device: torch.device) -> LayerTensors:
        """Tensors named '<prefix>.<local>' as {local: tensor}."""
        p = prefix + "."
        local = {n[len(p):]: self.get(n) for n in self.weight_map if n.startswith(p)}
        return LayerTensors(local, lambda name: self.shared(name, device))


def read_config(checkpoint: Path) -> dict:
    cfg = checkpoint / "config.json"
    if not checkpoint.is_dir() or not cfg.exists():
        raise CompressError(
            f"checkpoint {str(checkpoint)!r} is not a Hugging Face model folder (no config.json); "
            "pass the output folder of `compress run`"
        )
    return json.loads(cfg.read_text())


def _resolve_dtype(dtype: torch.dtype | str | None, cfg: Mapping, device: torch.device) -> torch.dtype:
    if dtype is None:
        if device.type == "cpu":
            return torch.float32  # CPU half matmuls are slow and less accurate; fp32 is the CPU reference
        name = cfg.get("dtype") or cfg.get("torch_dtype") or "float16"
        dtype = name if name in ("float16", "bfloat16") else "float16"
    if isinstance(dtype, str):
        table = {"float16": torch.float16, "fp16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
                 "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
                 "float64": torch.float64}  # float64: validation of the reference math only
        if dtype not in table:
            raise CompressError(f"dtype={dtype!r} is not supported; use float16, bfloat16 or float32 (float64 to validate)")
        dtype = table[dtype]
    return dtype


def _resolve_device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise CompressError(f"device={str(device)!r} is not supported; use 'cuda' or 'cpu'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CompressError("device='cuda' but no CUDA GPU is visible; pass device='cpu'")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= (n := torch.cuda.device_count()):
            raise CompressError(f"device={str(device)!r}: this machine has {n} CUDA GPU{'s' if n > 1 else ''} "
                                f"(cuda:0{f'..cuda:{n - 1}' if n > 1 else ''}); pick one of them")
    elif dev.type != "cpu":
        raise CompressError(f"device={str(device)!r} is not supported; use 'cuda' or 'cpu'")
    return dev


# ---- model assembly -------------------------------------------------------------------------------


def build_skeleton(cfg: dict, dtype: torch.dtype) -> nn.Module:
    """The architecture of `cfg` on the meta device (no quantization config applied)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    model_type = cfg.get("model_type")
    if not model_type:
        raise CompressError("config.json has no model_type; it is not a transformers checkpoint")
    try:
        config = AutoConfig.for_model(**cfg)
    except (KeyError, ValueError) as e:
        raise CompressError(f"transformers does not know model_type={model_type!r} ({e}); upgrade transformers") from None
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model


def linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


def _rebuild_meta_buffers(model: nn.Module, device: torch.device) -> None:
    """Recreate modules whose non-persistent buffers are still on meta (rotary embeddings)."""
    for name, mod in list(model.named_modules()):
        if not any(b.is_meta for b in mod.buffers(recurse=False)):
            continue
        cfg = getattr(mod, "config", None)
        if cfg is None or "Rotary" not in type(mod).__name__:
            bad = [n for n, b in mod.named_buffers(recurse=False) if b.is_meta]
            raise CompressError(
                f"{name}: buffers {bad} are not stored in the checkpoint and compress.runtime cannot rebuild them "
                f"for {type(mod).__name__}; load this architecture with transformers directly"
            )
        with torch.device(device):
            fresh = type(mod)(config=cfg)
        model.set_submodule(name, fresh)


def place_quant_layers(
    model: nn.Module,
    specs: Mapping[str, LayerSpec],
    tensors_of: callable,
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, QuantLinear]:
    """Replace each planned Linear by its runtime class, built from `tensors_of(name) -> {local: tensor}`."""
    placed = {}
    for name, spec in specs.items():
        cls = get_format(spec.format)
        mod = cls.from_checkpoint(spec, tensors_of(name), device=device, dtype=dtype)
        model.set_submodule(name, mod)
        placed[name] = mod
    return placed


def choose_backends(
    placed: Mapping[str, QuantLinear], device: torch.device, backend: str, info: RuntimeInfo
) -> None:
    """Per layer: kernel where it can run, else the reference (warned once per format, or an error)."""
    if backend not in BACKENDS:
        raise CompressError(f"backend={backend!r} is not one of {BACKENDS}")
    fell_back: dict[str, list[str]] = defaultdict(list)
    interp = kb.allow_interpreter() if backend == "kernel" and device.type == "cpu" else contextlib.nullcontext()
    with interp:
        _pick(placed, device, backend, info, fell_back)
    if backend == "reference":
        return
    for key, names in fell_back.items():
        warnings.warn(
            f"compress.runtime: {len(names)} layer(s) of format {key} run the plain-torch reference on {device} "
            f"({info.fallback_reasons[key]}); results are the same math but slow",
            ReferenceFallbackWarning,
            stacklevel=3,
        )
    for key, (names, reason) in _partly_on_reference(placed, device).items():
        info.fallback_reasons.setdefault(key, reason)
        warnings.warn(
            f"compress.runtime: {len(names)} layer(s) of format {key} run the plain-torch reference for some "
            f"calls on {device} ({reason}); results are the same math but slow",
            ReferenceFallbackWarning,
            stacklevel=3,
        )


def _partly_on_reference(placed, device) -> dict[str, tuple[list[str], str]]:
    """Layers on the kernel backend whose format says that some calls still take the reference
    (`kernel_partial(device, spec)`, e.g. a W8A8 width the int8 GEMM cannot take), by format."""
    out: dict[str, tuple[list[str], str]] = {}
    for name, mod in placed.items():
        partial = getattr(type(mod), "kernel_partial", None)
        reason = partial(device, mod.spec) if partial is not None and mod.backend == "kernel" else None
        if reason:
            out.setdefault(mod.format_key, ([], reason))[0].append(name)
    return out


def _pick(placed, device, backend, info, fell_back) -> None:
    for name, mod in placed.items():
        key = mod.format_key
        info.formats[key] = info.formats.get(key, 0) + 1
        reason = None if backend != "reference" else "backend='reference' was asked for"
        if reason is None:
            reason = type(mod).kernel_unavailable(device, mod.spec)
        if reason is None:
            mod.use_kernel()
            info.backends.setdefault(key, "kernel")
            continue
        if backend == "kernel":
            raise CompressError(f"{name}: no kernel for format {key} on {device} ({reason}); use backend='auto'")
        fell_back[key].append(name)
        info.fallback_reasons.setdefault(key, reason)
        info.backends[key] = "reference" if info.backends.get(key) != "kernel" else "kernel+reference"


@contextlib.contextmanager
def reference_backend(model: nn.Module):
    """Within the block, every compressed layer computes the plain-torch reference (same buffers),
    so kernel and reference logits can be compared on one loaded model."""
    mods = [m for m in model.modules() if isinstance(m, QuantLinear)]  # (a single layer works too)
    saved = [m.backend for m in mods]
    for m in mods:
        m.backend = "reference"
    try:
        yield model
    finally:
        for m, b in zip(mods, saved):
            m.backend = b


def finish_dense_part(model: nn.Module, state: Mapping[str, torch.Tensor], device: torch.device, dtype: torch.dtype) -> None:
    """Load the dense tensors (embeddings, norms, unquantized Linears), tie weights, rebuild buffers."""
    expected = dict(model.state_dict(keep_vars=True))
    want = {}
    for k, t in state.items():
        if k in expected and expected[k].is_meta:
            want[k] = t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
    model.load_state_dict(want, strict=False, assign=True)
    if getattr(model.config, "tie_word_embeddings", False) or getattr(
        model.config.get_text_config(), "tie_word_embeddings", False
    ):
        model.tie_weights()
    _rebuild_meta_buffers(model, device)
    missing = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t is not None and t.is_meta]
    if missing:
        raise CompressError(
            f"checkpoint lacks {len(missing)} tensors of the architecture, e.g. {missing[:3]}; "
            "the folder is incomplete or belongs to another model"
        )


def load(
    checkpoint: str | Path,
    device: str | torch.device = "cuda",
    dtype: torch.dtype | str | None = None,
    backend: str = "auto",
) -> nn.Module:
    """Load a checkpoint written by `compress run` (or any compressed-tensors checkpoint we support).

    Args:
        checkpoint: Hugging Face folder (config.json + safetensors).
        device: "cuda" (the current GPU) or "cuda:N" (that GPU, whichever is current: the kernels run on their
            tensors' device) for the kernels, or "cpu" (plain-torch reference, with a warning).
        dtype: activation/compute dtype; default: the checkpoint's fp16/bf16 on CUDA, float32 on CPU.
        backend: "auto" (kernel where available, else reference with a ReferenceFallbackWarning),
            "kernel" (error if any layer has no kernel), "reference" (always the plain-torch math).

    Returns:
        An eval-mode transformers `*ForCausalLM`; `model.compress_runtime` (RuntimeInfo) says which
        formats were found and which backend each runs on.
    """
    folder = Path(checkpoint)
    cfg = read_config(folder)
    dev = _resolve_device(device)
    dt = _resolve_dtype(dtype, cfg, dev)
    model = build_skeleton(cfg, dt)
    specs = plan_layers(cfg.get("quantization_config"), linear_modules(model), cfg.get("compress"))
    ckpt = CheckpointTensors(folder, packed_files(cfg))
    placed = place_quant_layers(model, specs, lambda name: ckpt.layer(name, dev), dev, dt)
    taken = {f"{n}." for n in specs}
    dense = {k: ckpt.get(k) for k in ckpt.names() if not any(k.startswith(p) for p in taken)}
    finish_dense_part(model, dense, dev, dt)
    info = RuntimeInfo(checkpoint=str(folder), device=str(dev), dtype=str(dt).replace("torch.", ""))
    choose_backends(placed, dev, backend, info)
    model.compress_runtime = info
    return model.eval()
