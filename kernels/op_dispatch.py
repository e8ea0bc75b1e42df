"""Eager calls of the kernels' public functions: their launcher directly, or their torch custom op.

Every kernel is registered as a torch custom op with a fake (torch.compile, torch.export and CUDA graphs need that), and
its public function (`w4a16_linear`, `w8a8_linear`, ...) used to call it through `torch.ops.compress.*` always. In
eager PyTorch that dispatch cost 24-40 us of host time a call on the H200 machine (session 38,
bench/results/h200/kernels_s38/eager_probe.py): more than the decode-size kernels it launches run (4-16 us), and paid
on every layer of every token by an eager caller (transformers' generate on a compress.runtime model). The public
functions now ask `direct_call` first. torch-only (no Triton), so the CUDA C++ launchers can import it.
COMPRESS_KERNEL_DISPATCH=op (read at import) sends every call through the custom op again (A/B runs, debugging).
"""

from __future__ import annotations

import os

import torch

from compress.errors import CompressError

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_MODE = os.environ.get("COMPRESS_KERNEL_DISPATCH", "direct")
if _MODE not in ("direct", "op"):
    raise CompressError(f"COMPRESS_KERNEL_DISPATCH={_MODE!r} is not 'direct' or 'op'; unset it (direct) or set op")
_ALWAYS_OP = _MODE == "op"


def direct_call(*args) -> bool:
    """Whether a kernel's public function may run its launcher directly (True) or must go through its custom op: while
    torch.compile / torch.export trace (they record the op and shape its output by its fake), for tensor subclasses
    (fake, functional, ...), and where autograd would record the call (an input that requires grad: the ops have no
    backward, and the op path says so when one is asked for)."""
    if _ALWAYS_OP or torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for a in args:
        if isinstance(a, torch.Tensor) and (type(a) not in _PLAIN_TENSORS or (grad and a.requires_grad)):
            return False
    return True
