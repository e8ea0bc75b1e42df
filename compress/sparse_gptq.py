"""GPTQ that keeps a 2:4 mask: pruned weights are quantized to zero inside the column loop.

llmcompressor's GPTQ propagates each column's rounding error into the columns after it, pruned
positions included, so after SparseGPT they come back nonzero (measured: 1.3M broken groups of 4 on
SmolLM2). Zeroing them again afterwards (`compress.sparsity.reapply_masks`) restores the pattern but
throws away error nobody compensated. Here the pruned positions are "quantized" to exactly zero
*inside* GPTQ's loop, so that error is fed forward to the columns still to come like any rounding
error -- the rule SparseGPT itself uses when it prunes and quantizes jointly.

How it hooks in, without copying GPTQ:
- compressed-tensors dispatches `gptq_block_update` through its backend registry (`ImplBackend`);
  we register one more backend, tried first, that only accepts a call while a mask is active.
- The masks are read from the weights GPTQ receives: a layer that enters GPTQ exactly 2:4 sparse
  keeps its zeros. GPTQ may permute columns (activation ordering), so the mask is taken from the
  weights *after* its own `apply_activation_ordering`, in the order the loop walks them.
Scales, zero-points, dampening, ordering and the update rule stay llmcompressor's; the backend
differs from llmcompressor's eager `gptq_block_update` (0.14) only in the marked line.
"""
from __future__ import annotations

import contextlib
import threading
from copy import copy

import torch

from compress.sparsity import is_24_sparse

_state = threading.local()  # .keep: bool [batch, rows, cols] in GPTQ's column order, or None
_REGISTERED = False


def _compress_gptq_block_update_keep_24(W1, Hinv1, Q1, Err1, losses1, *, scale, zero_point, global_scale, g_idx,
                                        quant_args, i1):
    """llmcompressor's eager GPTQ block update, with pruned weights quantized to zero (the marked line)."""
    from compressed_tensors.quantization import QuantizationStrategy, fake_quantize
    from llmcompressor.modifiers.gptq.helpers import column_scale_window

    keep = _state.keep
    width = W1.shape[-1]
    per_column = copy(quant_args)
    per_column.strategy = QuantizationStrategy.CHANNEL
    eff, zp = column_scale_window(scale, zero_point, global_scale, g_idx, quant_args,
                                  num_rows=W1.shape[-2], i1=i1, i2=i1 + width)
    for i in range(width):
        w = W1[:, :, i]
        q = fake_quantize(w.transpose(0, 1), eff[:, :, i].transpose(0, 1),
                          None if zp is None else zp[:, :, i].transpose(0, 1), per_column).transpose(0, 1)
        q = q * keep[:, :, i1 + i].to(q.dtype)  # the one difference: pruned weights quantize to 0
        d = Hinv1[:, i, i]
        err = (w - q) / d[:, None]
        Q1[:, :, i] = q
        Err1[:, :, i] = err
        losses1[:, :, i] = err.square()
        W1[:, :, i:] -= err.unsqueeze(-1) * Hinv1[:, i, i:].unsqueeze(1)


def _mask_active(*args, **kwargs) -> bool:  # noqa: ARG001 - the registry passes the call's arguments
    return getattr(_state, "keep", None) is not None


def _register_once() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from compressed_tensors.utils.impl_backend import ImplBackend

    # Priority -1: before llmcompressor's Triton backend (0), which cannot take a mask.
    # The registry keys backends by function name, unique across all ops: hence the long name.
    ImplBackend.register("gptq_block_update", _mask_active, -1)(_compress_gptq_block_update_keep_24)
    _REGISTERED = True


@contextlib.contextmanager
def gptq_keeps_24_masks():
    """While active, every layer that enters llmcompressor's GPTQ exactly 2:4 sparse leaves it with the
    same zeros, the pruning error compensated by the later columns. Dense layers are untouched."""
    import llmcompressor.modifiers.gptq.gptq_quantize as gq

    _register_once()
    original = gq.apply_activation_ordering

    def ordering_with_mask(weights, hessians, actorder):
        # Mask per stacked layer before GPTQ permutes the (in-place) working tensors.
        is_24 = torch.tensor([is_24_sparse(w) for w in weights], device=weights.device)
        weights, hessians, perm = original(weights, hessians, actorder)
        _state.keep = (weights != 0) | ~is_24[:, None, None] if bool(is_24.any()) else None
        return weights, hessians, perm

    gq.apply_activation_ordering = ordering_with_mask
    try:
        yield
    finally:
        gq.apply_activation_ordering = original
        _state.keep = None
