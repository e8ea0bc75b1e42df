"""Input-column equalisation folded into the model, so shared VPTQ codebooks see homogeneous vectors.

A VPTQ vector runs down one input column of a weight, normalised by the row scales s; but input columns
of one layer differ in magnitude (a few input channels carry much larger weights), and a codebook shared
by all columns of 30 layers spends centroids on that spread. GPTQ's per-group scales absorb it; a VPTQ
layer stores only row scales. So, before fitting, every targeted Linear's input column j is divided by a
factor c_j and the producer of that input is multiplied by c_j, which leaves the model's function
unchanged (up to the float rounding of the two products) and needs no new tensor in the checkpoint (the
producers are stored anyway):

    q/k/v_proj columns  <- input_layernorm.weight            (one c for the three: they share the input)
    gate/up_proj columns <- post_attention_layernorm.weight  (one c for the two)
    down_proj column j   <- up_proj row j                    (act(gate) * up is linear in up)
    o_proj column h*d+i  <- v_proj row (h // groups)*d + i   (one c per v row: heads sharing a kv head)

c_j = (rms_j / geomean(rms))^p, rms_j the RMS of column j over the layers reading that input, p =
`equalize` (0 disables, 1 divides the column RMS out entirely). Powers of two would make the fold exact
in any float format, but rounding c to them kept only half of the gain (summed proxy loss of SmolLM2
q_proj, blocks 0/15/29, shared k4096/r256 codebooks: 0.0147 none, 0.0139 powers of two, 0.0134 exact c);
the rounding of a continuous c is ~1e-7 relative in float32 (2^-9 in bf16), far below 2-3-bit noise.
The second-order objective tr(E H E^T) is unchanged by the substitution (H becomes diag(c) H diag(c)),
only the vectors the codebook sees change. Only Llama-layout decoder blocks (the names above) are folded; others are left as they are.
"""

from __future__ import annotations

import torch
from torch import nn


def _factors(rms: torch.Tensor, power: float) -> torch.Tensor:
    """Factors (rms / geomean(rms))^power for column RMS values (float32; all-zero columns get 1)."""
    log = torch.log2(rms.double().clamp_min(1e-30))
    live = rms > 0
    log = torch.where(live, log - log[live].mean() if live.any() else log, torch.zeros_like(log))
    return torch.exp2(power * log).float()


def _col_rms(weights: list[torch.Tensor]) -> torch.Tensor:
    w = torch.cat([x.detach().float() for x in weights])
    return w.pow(2).mean(0).sqrt()


def _scale_cols(lin: nn.Linear, c: torch.Tensor) -> None:
    lin.weight.data.div_(c.to(lin.weight.device, lin.weight.dtype)[None, :])


def _scale_rows(lin: nn.Linear, c: torch.Tensor) -> None:
    c = c.to(lin.weight.device, lin.weight.dtype)
    lin.weight.data.mul_(c[:, None])
    if lin.bias is not None:
        lin.bias.data.mul_(c)


def _scale_norm(norm: nn.Module, c: torch.Tensor) -> bool:
    w = getattr(norm, "weight", None)
    if not isinstance(w, torch.Tensor) or w.shape != c.shape or getattr(norm, "bias", None) is not None:
        return False  # a LayerNorm with a bias (or no weight) cannot absorb a per-channel factor alone
    w.data.mul_(c.to(w.device, w.dtype))
    return True


def _get(block: nn.Module, path: str):
    m = block
    for part in path.split("."):
        m = getattr(m, part, None)
        if m is None:
            return None
    return m


def equalize_block(block: nn.Module, targeted: set[int], power: float) -> list[str]:
    """Fold column factors into one decoder block (module docstring). `targeted` holds id() of the
    Linears VPTQ quantizes: only their columns are equalised. Returns what was folded, e.g. ['down<-up']."""
    done = []
    attn = _get(block, "self_attn")
    q, k, v, o = (_get(block, f"self_attn.{p}_proj") for p in "qkvo")
    gate, up, down = (_get(block, f"mlp.{p}_proj") for p in ("gate", "up", "down"))
    lins = [q, k, v, o, gate, up, down]
    if not all(isinstance(m, nn.Linear) for m in lins):
        return done
    # Producer sides first: v rows and up rows change before their own columns' factors are measured.
    groups, head_dim = getattr(attn, "num_key_value_groups", 0), getattr(attn, "head_dim", 0)
    if id(o) in targeted and groups and head_dim and v.out_features % head_dim == 0 and v.out_features * groups == o.in_features:
        kv = v.out_features // head_dim
        # o column (h, i) reads v row (h // groups, i) (repeat_kv): one factor per v row, RMS over its heads.
        sq = o.weight.detach().float().pow(2).mean(0).reshape(kv, groups, head_dim).mean(1)  # (kv, head_dim)
        c = _factors(sq.sqrt().reshape(-1), power)  # (v.out_features,)
        _scale_rows(v, c)
        _scale_cols(o, c.reshape(kv, 1, head_dim).expand(kv, groups, head_dim).reshape(-1))
        done.append("o<-v")
    if id(down) in targeted and up.out_features == down.in_features and gate.out_features == up.out_features:
        c = _factors(_col_rms([down.weight]), power)
        _scale_rows(up, c)
        _scale_cols(down, c)
        done.append("down<-up")
    for consumers, norm_name, label in (([q, k, v], "input_layernorm", "qkv<-input_layernorm"),
                                        ([gate, up], "post_attention_layernorm", "gate/up<-post_attention_layernorm")):
        norm = _get(block, norm_name)
        if norm is None or not all(id(m) in targeted for m in consumers):
            continue
        c = _factors(_col_rms([m.weight for m in consumers]), power)
        if _scale_norm(norm, c):
            for m in consumers:
                _scale_cols(m, c)
            done.append(label)
    return done


@torch.no_grad()
def equalize_model(blocks: nn.ModuleList, linears: dict[str, nn.Linear], power: float) -> dict[str, list[str]]:
    """equalize_block on every block; returns {block index: folds} for the blocks that were changed."""
    targeted = {id(m) for m in linears.values()}
    out = {}
    for i, block in enumerate(blocks):
        done = equalize_block(block, targeted, power)
        if done:
            out[str(i)] = done
    return out
