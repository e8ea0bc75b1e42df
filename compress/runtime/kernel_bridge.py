"""The one place where the runtime calls the project's kernels (`kernels/`, top-level package).

Every function here either returns the reason a kernel cannot run (a short string, shown in the
fallback warning) or calls the kernel's public launcher. Imports are lazy: `kernels` needs Triton,
which CPU-only installs may lack, and the runtime must still load checkpoints there.
"""

from __future__ import annotations

import contextlib
import importlib
from contextvars import ContextVar
from functools import lru_cache
from types import ModuleType

import torch

# On a CPU the kernels can only run in Triton's interpreter (minutes for a real model): used only
# when the caller insists on backend="kernel" (tests of the kernel wiring), never by default.
_INTERPRETER_OK: ContextVar[bool] = ContextVar("compress_runtime_interpreter_ok", default=False)


@contextlib.contextmanager
def allow_interpreter():
    token = _INTERPRETER_OK.set(True)
    try:
        yield
    finally:
        _INTERPRETER_OK.reset(token)


@lru_cache(maxsize=None)
def _kernel_module(name: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(f"kernels.{name}"), None
    except ImportError as e:  # triton missing, or the kernel has not landed
        return None, f"kernels.{name} cannot be imported ({e})"


def kernel_module(name: str) -> ModuleType:
    mod, why = _kernel_module(name)
    if mod is None:
        raise RuntimeError(why)
    return mod


def unavailable(device: torch.device, module: str, *attrs: str) -> str | None:
    """Reason the launcher `kernels.<module>.<attr>` cannot run on `device`, or None."""
    if device.type != "cuda" and not _INTERPRETER_OK.get():
        return f"Triton kernels need a CUDA GPU, device is {device.type}"
    mod, why = _kernel_module(module)
    if mod is None:
        return why
    missing = [a for a in attrs if not hasattr(mod, a)]
    if missing:
        return f"kernels.{module} has no {', '.join(missing)}"
    return None


def runtime_kernels_unavailable(device: torch.device) -> str | None:
    """Reason the runtime's own Triton kernels (compress.runtime.decode_kernels) cannot run on `device`."""
    if device.type != "cuda" and not _INTERPRETER_OK.get():
        return f"Triton kernels need a CUDA GPU, device is {device.type}"
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return f"triton cannot be imported ({e})"
    return None


_COMPILED: dict = {}


def gpu_compiled(fn):
    """`fn` compiled by torch.compile (one fused kernel for elementwise/gather work), cached per function;
    eager on CPU, where compiling costs more than it saves."""
    def call(*args):
        if not args[0].is_cuda:
            return fn(*args)
        if fn not in _COMPILED:
            _COMPILED[fn] = torch.compile(fn, fullgraph=True)
        return _COMPILED[fn](*args)

    return call


def _w8a8_epilogue(acc: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The W8A8 kernel's epilogue order: acc * s_w[n] * s_x[m], in fp32.
    return (acc.float() * sw[None, :] * sx[:, None]).to(dtype)


_w8a8_epilogue_compiled = gpu_compiled(_w8a8_epilogue)


def int_mm_fits(m: int, k: int, n: int) -> bool:
    """torch._int_mm's shape rules on CUDA: M > 16, K and N multiples of 8."""
    return m > 16 and k % 8 == 0 and n % 8 == 0


def int_mm_w8a8(x2d: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """The W8A8 math through cuBLAS's int8 GEMM: the kernels' per-token activation quantizer, exact int32
    products (torch._int_mm), then the same fp32 scaling as kernels/w8a8.py."""
    q, sx = kernel_module("w8a8").quantize_per_token(x2d)
    acc = torch._int_mm(q, weight.t())
    return _w8a8_epilogue_compiled(acc, sx, w_scale.reshape(-1).float(), x2d.dtype)
