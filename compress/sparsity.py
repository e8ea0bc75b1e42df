"""Keep a 2:4 pattern through later stages and prove it on every group of 4.

GPTQ after SparseGPT propagates quantization error into pruned positions, so they come back nonzero
(measured on stories260K: the 2:4 pattern was gone after llmcompressor's GPTQ). We record each
layer's mask right after the sparsity stage; GPTQ then keeps it itself (compress.sparse_gptq), and
after the remaining stages the mask is re-applied as a safety net for any other stage that refills
(zero is exactly representable by symmetric and asymmetric integer grids alike, so the weights stay
on their quantization grid; the report counts what was refilled), then every group is checked.
"""
from __future__ import annotations

import torch

from compress.errors import CompressError


def capture_masks(model, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Boolean keep-masks (True = nonzero) of every Linear whose weight is already 2:4 sparse."""
    masks = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and (names is None or name in names):
            w = mod.weight.detach()
            if is_24_sparse(w):
                masks[name] = (w != 0).cpu()
    return masks


def is_24_sparse(w: torch.Tensor) -> bool:
    """A weight that is exactly 2:4 sparse: some zeros, and no group of 4 along a row with more than 2 nonzeros."""
    return w.shape[-1] % 4 == 0 and bool((w == 0).any()) and _violations(w) == 0


def _violations(w: torch.Tensor) -> int:
    groups = (w.detach().reshape(w.shape[0], -1, 4) != 0).sum(-1)  # (N, K/4) nonzeros per group
    return int((groups > 2).sum())


@torch.no_grad()
def reapply_masks(model, masks: dict[str, torch.Tensor]) -> int:
    """Zero the pruned positions again; returns how many weights had been refilled."""
    refilled = 0
    modules = dict(model.named_modules())
    for name, keep in masks.items():
        w = modules[name].weight
        keep = keep.to(w.device)
        refilled += int(((w != 0) & ~keep).sum())
        w.mul_(keep.to(w.dtype))
    return refilled


def check_24(model, masks: dict[str, torch.Tensor]) -> dict[str, int]:
    """Violating groups of 4 per masked layer; raises if any layer breaks the pattern."""
    modules = dict(model.named_modules())
    bad = {name: _violations(modules[name].weight) for name in masks}
    broken = {n: v for n, v in bad.items() if v}
    if broken:
        first = next(iter(broken))
        raise CompressError(
            f"2:4 pattern broken in {len(broken)} layer(s) (e.g. {first}: {broken[first]} groups of 4 with >2 nonzeros); "
            "this is a bug in the stage order: report it with the recipe"
        )
    return bad
