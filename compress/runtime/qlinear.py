"""`QuantLinear`: the base of every compressed Linear the runtime puts into a transformers model.

A subclass owns one checkpoint format: it reads the layer's tensors from the checkpoint
(`from_checkpoint`), computes the layer in plain torch (`reference`, the math the kernels are tested
against) and, where a kernel exists for the device, through the project's kernel (`kernel`). Which of
the two runs is fixed once at load (`backend`). On the kernel backend a format may offer several
ways to compute the same math (`kernel_paths`: its kernel, dequantize + cuBLAS, torch._int_mm, ...);
`compress.runtime.paths` measures them once per (shape, M) on the GPU and runs the fastest. The choice
depends only on shapes, so the forward stays safe under CUDA graph capture.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar, Mapping

import torch
import torch.nn as nn

from compress.errors import CompressError
from compress.runtime.paths import TABLE, Candidate
from compress.runtime.spec import LayerSpec
from kernels.op_dispatch import on_input_device


class QuantLinear(nn.Module):
    """Base class; subclasses register with `@register_format(key)`."""

    format_key: ClassVar[str] = ""
    # Buffers whose rows (dim 0) or columns (dim 1) run over output channels: layers of one class
    # that read the same input can be fused into one wider layer by concatenating these (fuse.py).
    # Empty: the format cannot be fused (e.g. VPTQ, whose codebooks differ per layer).
    CAT_DIMS: ClassVar[dict[str, int]] = {}

    def __init__(self, spec: LayerSpec, dtype: torch.dtype):
        super().__init__()
        self.in_features = spec.in_features
        self.out_features = spec.out_features
        self.spec = spec
        self.dtype = dtype
        self.backend = "reference"

    # ---- construction ------------------------------------------------------------------------------

    @classmethod
    def from_checkpoint(
        cls, spec: LayerSpec, tensors: Mapping[str, torch.Tensor], *, device: torch.device, dtype: torch.dtype
    ) -> "QuantLinear":
        """Build the layer from its checkpoint tensors (local names, e.g. "weight_packed"), on `device`."""
        raise NotImplementedError

    @staticmethod
    def _take(spec: LayerSpec, tensors: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
        if name not in tensors:
            raise CompressError(
                f"{spec.name}: tensor {spec.name}.{name} is missing from the checkpoint for format {spec.format}; "
                f"found {sorted(tensors)} (the checkpoint is incomplete or was written by another format)"
            )
        return tensors[name]

    def _set_bias(self, tensors: Mapping[str, torch.Tensor], device: torch.device) -> None:
        bias = tensors.get("bias")
        if self.spec.bias and bias is None:
            raise CompressError(f"{self.spec.name}: the architecture has a bias but {self.spec.name}.bias is missing")
        self.register_buffer("bias", None if bias is None else bias.to(device=device, dtype=self.dtype))

    # ---- kernels -----------------------------------------------------------------------------------

    @classmethod
    def kernel_unavailable(cls, device: torch.device, spec: LayerSpec) -> str | None:
        """None when `kernel` can run this layer on `device`; otherwise the reason (shown in the warning)."""
        return "no kernel is wired for this format"

    def use_kernel(self) -> None:
        """Switch this layer to its kernel (subclasses convert buffers to the kernel's layout here)."""
        self.backend = "kernel"

    def kernel(self, x2d: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def kernel_paths(self, x2d: torch.Tensor) -> list[Candidate]:
        """Ways to compute this layer on `x2d` (M, K) on the kernel backend, each a (name, no-argument
        callable) with the same math; the first is the default where nothing was measured (CPU)."""
        return [("kernel", partial(self.kernel, x2d))]

    # ---- math --------------------------------------------------------------------------------------

    def reference(self, x2d: torch.Tensor) -> torch.Tensor:
        """Plain-torch (M, K) -> (M, N), without bias."""
        raise NotImplementedError

    def dequantize(self) -> torch.Tensor:
        """The dense (N, K) weight this layer represents, in float32 (for tests and inspection)."""
        raise NotImplementedError

    # Its kernels, the path table's timing and the capture checks all act on the current device: make it the layer's.
    @on_input_device
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2d = x.reshape(-1, shape[-1])  # (M, K)
        if self.backend == "kernel":
            base = self.__dict__.get("_path_key")  # built once: the f-string cost ~2 us a call of an eager step
            if base is None:
                base = self.__dict__["_path_key"] = f"{self.format_key}{list(self.fuse_key())}"
            key = (base, self.out_features, self.in_features, x2d.shape[0], str(x2d.dtype))
            # Once the table has chosen a path for this key, run it directly: listing the paths asks each kernel
            # whether it supports the call (shape, dtype and build checks in Python), per call and per path, which an
            # eager decode step would pay for every layer and token. Only a choice the table still holds is followed.
            chosen = TABLE.chosen(key)
            run = self._chosen_paths.get((key, chosen)) if chosen is not None else None
            if run is not None:
                f, args, kw = run
                y = f(x2d, *args, **kw)
            else:
                paths = self.kernel_paths(x2d)
                y = TABLE.run(key, paths, x2d.device)
                chosen = TABLE.choice.get(key)
                fn = next((f for n, f in paths if n == chosen), None)
                rebound = self._rebindable(fn, x2d) if fn is not None else None
                if rebound is not None:
                    self._chosen_paths[(key, chosen)] = rebound
        else:
            y = self.reference(x2d)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)

    @property
    def _chosen_paths(self) -> dict:
        """(table key, chosen path) -> (f, args, kwargs): forward's cache, f(x2d, *args, **kwargs) runs that path. Plain
        data, not closures, so the layer still pickles and deep-copies (a copy's entry then names the copy's tensors)."""
        return self.__dict__.setdefault("_chosen_paths_cache", {})

    def _rebindable(self, fn, x2d: torch.Tensor):
        """(f, rest, kwargs) of `fn` = `partial(f, x2d, *rest, **kwargs)` whose other tensors are the layer's own (buffers
        or attributes): then nothing in it was computed from this call's input, and f(new_x2d, *rest, **kwargs) runs the
        same path on another input. None otherwise (the path is listed again on every call, as before)."""
        if not isinstance(fn, partial) or not fn.args or fn.args[0] is not x2d:
            return None
        own = [*self.buffers(), *self.parameters(), *(v for v in vars(self).values() if isinstance(v, torch.Tensor))]
        rest = [*fn.args[1:], *fn.keywords.values()]
        if any(isinstance(a, torch.Tensor) and not any(a is o for o in own) for a in rest):
            return None
        return fn.func, tuple(fn.args[1:]), dict(fn.keywords)

    def _apply(self, fn, recurse=True):
        # .to(), .cuda(), .half() ... give the layer new tensors (and dtypes, which fuse_key may hold); the caches'
        # entries name the old ones.
        self._chosen_paths.clear()
        for name in self._DROPPED_ON_MOVE:
            self.__dict__.pop(name, None)
        return super()._apply(fn, recurse)

    # Per-layer caches in __dict__ built from the layer's tensors, dropped when they move (_apply) and left out of
    # copies and pickles (a prepared launch holds a ctypes function and raw pointers: rebuilt on the copy's first call).
    # Subclasses add their own (Int4Linear: its prepared launches).
    _DROPPED_ON_MOVE: ClassVar[tuple[str, ...]] = ("_path_key",)

    def __getstate__(self):
        state = super().__getstate__()
        for name in self._DROPPED_ON_MOVE:
            state.pop(name, None)
        return state

    def fuse_key(self) -> tuple:
        """Layers can be fused only when these agree (besides class, backend and in_features)."""
        return ()

    # ---- accounting --------------------------------------------------------------------------------

    def weight_bytes(self) -> int:
        """Bytes of every tensor this layer holds (what one forward must read from memory at least)."""
        total = sum(b.numel() * b.element_size() for b in self.buffers())
        return total + sum(p.numel() * p.element_size() for p in self.parameters())

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, format={self.format_key}, backend={self.backend}"
