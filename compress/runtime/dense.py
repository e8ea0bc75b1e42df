"""Dense (fp16/bf16) Linear layers of the fast engine: cuBLAS, or at M = 1 the runtime's GEMV when the
path table measured it faster for that shape (cuBLAS's M=1 kernels leave part of the bandwidth unused
on some shapes, e.g. 4096x4096)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from compress.runtime.paths import TABLE


def linear(mod: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """mod(x), through the fastest measured path when `mod` is a plain dense Linear on the GPU."""
    if type(mod) is not nn.Linear or not TABLE.enabled(x.device):
        return mod(x)
    w, bias = mod.weight, mod.bias
    n, k = w.shape
    x2d = x.reshape(-1, k)
    m = x2d.shape[0]
    cands = [("cublas", partial(F.linear, x2d, w, bias))]
    if m == 1 and bias is None and w.is_contiguous() and x.dtype == w.dtype and w.dtype in (torch.float16, torch.bfloat16):
        from compress.runtime.decode_kernels import GEMV_CONFIGS, gemv

        cands += [("gemv_%dx%d_w%d" % c, partial(gemv, x2d, w, c)) for c in GEMV_CONFIGS]
    y = TABLE.run(("dense", n, k, m, str(w.dtype)), cands, x.device)
    return y.reshape(*x.shape[:-1], n)


def silu_mul_linear(mod: nn.Module, gu: torch.Tensor, silu_mul) -> torch.Tensor:
    """mod(silu(gate) * up) for gu = [gate | up] (.., 2I): at M = 1 on a dense Linear, also the GEMV that
    computes silu * up while it reads its input (one launch less per layer), if measured faster."""
    if type(mod) is not nn.Linear or not TABLE.enabled(gu.device) or mod.bias is not None:
        return linear(mod, silu_mul(gu))
    w = mod.weight
    n, k = w.shape
    g2d = gu.reshape(-1, 2 * k)
    if g2d.shape[0] != 1 or not w.is_contiguous() or gu.dtype != w.dtype or w.dtype not in (torch.float16, torch.bfloat16):
        return linear(mod, silu_mul(gu))
    from compress.runtime.decode_kernels import GEMV_CONFIGS, gemv

    cands = [("silu+dense", lambda: linear(mod, silu_mul(g2d)))]
    cands += [("gemv_silu_%dx%d_w%d" % c, partial(gemv, g2d, w, c, True)) for c in GEMV_CONFIGS]
    y = TABLE.run(("dense_silu", n, k, 1, str(w.dtype)), cands, gu.device)
    return y.reshape(*gu.shape[:-1], n)
