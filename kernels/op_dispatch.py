"""Eager calls of the kernels' public functions: their launcher directly, or their torch custom op.

Every kernel is registered as a torch custom op with a fake (torch.compile, torch.export and CUDA graphs need that), and
its public function (`w4a16_linear`, `w8a8_linear`, ...) used to call it through `torch.ops.compress.*` always. In
eager PyTorch that dispatch cost 24-40 us of host time a call on the H200 machine (session 38,
bench/results/h200/kernels_s38/eager_probe.py): more than the decode-size kernels it launches run (4-16 us), and paid
on every layer of every token by an eager caller (transformers' generate on a compress.runtime model). The public
functions now ask `direct_call` first. torch-only (no Triton), so the CUDA C++ launchers can import it.
COMPRESS_KERNEL_DISPATCH=op (read at import) sends every call through the custom op again (A/B runs, debugging).

`on_input_device` makes a public function run on its tensors' GPU whatever the current device is, as torch ops do.
"""

from __future__ import annotations

import functools
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


# torch.cuda.current_device() without its lazy-init check (a CUDA tensor exists, so CUDA is initialized): ~0.1 us.
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def on_input_device(fn):
    """Decorator for a kernel's public function: run it with the CUDA device of its first tensor argument current.

    Why: torch ops run on their tensors' device whatever the current device is, and `compress.runtime.load(...,
    device="cuda:1")` relies on that. Triton launches on the current device, and the CUDA C++ launchers ask the CUDA
    runtime for the current device's occupancy and shared-memory limit; with cuda:0 current and tensors on cuda:1 a
    call read another GPU's memory (session 40 on two H200s: an illegal memory access, tests/test_second_gpu.py).
    Host cost where the device is already current: 1.25 us against 0.12 us for a bare call of an identity function on
    the H200 machine of session 40 (bench/results/h200/kernels_s40/guard_cost.py), ~0.3 us with a CPU tensor here."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        t = args[0] if args and isinstance(args[0], torch.Tensor) else \
            next((a for a in args if isinstance(a, torch.Tensor)), None)
        index = t.get_device() if t is not None else -1  # -1 off CUDA; 0.08 us where t.device.type takes 0.44
        # (torch.compile traces through here: its generated code guards the device itself)
        if index >= 0 and not torch.compiler.is_compiling() and index != _current_device():
            with torch.cuda.device(index):
                return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return run
