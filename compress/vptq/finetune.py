"""End-to-end refinement of what a VPTQ checkpoint stores besides its indices: the codebooks (main and
residual, shared or per layer) and the per-row scales, by distillation from the float model.

The layer-wise fit minimises each layer's second-order output error given its own inputs; errors of
earlier layers still add up through the network. With the indices fixed, the model's output is a smooth
function of the centroids and scales, so a few hundred Adam steps on the calibration windows, minimising
KL(float model || quantized model) over every token, move them to where the whole network errs least
(VPTQ's and AQLM's end-to-end fine-tuning, here restricted to the quantization's own parameters: no
other weight of the model changes). Scales are trained in log space (they stay positive and their steps
are relative). A held-out share of the calibration windows is scored before training and after every
pass over the rest; the parameters with the lowest held-out KL are kept, so the refinement never returns
something worse on held-out data than the layer-wise fit it started from.

Deterministic: batches are drawn with a seeded CPU generator, the codebook gradient (a scatter-add of
the vector gradients onto the centroids, atomics on CUDA) is a sorted segment sum instead, and attention
runs on the math SDPA backend, whose backward has no atomics.
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import torch
from torch import nn

from compress.vptq.format import VQWeight, unpack_indices


class _Gather(torch.autograd.Function):
    """book[idx] whose backward sums the rows' gradients per centroid in a fixed order (sort + cumsum)."""

    @staticmethod
    def forward(ctx, book: torch.Tensor, idx: torch.Tensor, order: torch.Tensor, ends: torch.Tensor, counts: torch.Tensor):
        ctx.save_for_backward(order, ends, counts)
        return book[idx]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        order, ends, counts = ctx.saved_tensors
        # Scan along the innermost dim of a (v, rows) copy: CUDA runs a cumsum along dim 0 of (rows, v) as one
        # sequential thread per column (the k-means fix of session 6; here it made one SmolLM2 backward take
        # seconds). On the CPU both scans add in the same order: same bits.
        g = grad[order].double().t().contiguous()
        csum = torch.cat([g.new_zeros(g.shape[0], 1), g.cumsum(1)], dim=1)
        return (csum[:, ends] - csum[:, ends - counts]).t().to(grad.dtype), None, None, None, None


@dataclass
class _Index:
    """Flat indices of one layer into one codebook, with the sort the gather backward needs."""

    idx: torch.Tensor  # (K*G,)
    order: torch.Tensor
    ends: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def of(cls, idx: torch.Tensor, k: int) -> _Index:
        flat = idx.reshape(-1)
        counts = torch.bincount(flat, minlength=k)
        return cls(flat, torch.argsort(flat, stable=True), counts.cumsum(0), counts)

    def gather(self, book: torch.Tensor) -> torch.Tensor:
        return _Gather.apply(book, self.idx, self.order, self.ends, self.counts)


@dataclass
class _Layer:
    name: str
    vq: VQWeight
    main_key: str
    res_key: str | None
    main: _Index
    res: _Index | None
    keep: torch.Tensor  # (K,) bool: regular columns (False: outlier columns, fixed)
    fixed: torch.Tensor | None  # (N, K) float32 outlier columns' values (zeros elsewhere), or None
    bias: torch.Tensor | None  # (N,) float32 row bias t (not trained)


def _book_key(vq: VQWeight, name: str, which: str) -> str:
    key = vq.codebook_key if which == "main" else vq.res_codebook_key
    return f"{which}:{key}" if key is not None else f"{which}:layer:{name}"


def _prepare(layers: dict[str, VQWeight], device: torch.device):
    params: dict[str, torch.Tensor] = {}
    prepared = []
    for name, vq in layers.items():
        vq = vq.to(device)
        n, k = vq.shape
        g = n // vq.vector_len
        main_key = _book_key(vq, name, "main")
        params.setdefault(main_key, vq.codebook.float().clone())
        idx = unpack_indices(vq.indices, vq.index_bits, g)
        res_key, res = None, None
        if vq.res_codebook is not None:
            res_key = _book_key(vq, name, "res")
            params.setdefault(res_key, vq.res_codebook.float().clone())
            res = _Index.of(unpack_indices(vq.res_indices, vq.res_index_bits, g), vq.res_codebook.shape[0])
        if vq.scale is not None:
            params[f"log_scale:{name}"] = vq.scale.float().log()
        keep = torch.ones(k, dtype=torch.bool, device=device)
        fixed = None
        if vq.outlier_cols is not None and vq.outlier_cols.numel():
            oc = vq.outlier_cols.long()
            keep[oc] = False
            oidx = unpack_indices(vq.outlier_indices, vq.outlier_index_bits, g)  # (n_out, G)
            vals = torch.zeros(k, n, device=device)
            vals[oc] = vq.outlier_codebook.float()[oidx].reshape(len(oc), n)
            fixed = vals.t().contiguous()
        bias = vq.bias.float() if vq.bias is not None else None
        prepared.append(_Layer(name, vq, main_key, res_key, _Index.of(idx, vq.codebook.shape[0]), res, keep, fixed, bias))
    return params, prepared


def _weight(layer: _Layer, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """The layer's reconstruction from the (trainable) parameters: format.dequantize, differentiably."""
    n, k = layer.vq.shape
    vec = layer.main.gather(params[layer.main_key])  # (K*G, v)
    if layer.res is not None:
        vec = vec + layer.res.gather(params[layer.res_key])
    w = vec.reshape(k, n).t()  # (N, K) normalised
    if layer.fixed is not None:
        w = torch.where(layer.keep[None, :], w, layer.fixed)
    if f"log_scale:{layer.name}" in params:
        w = w * params[f"log_scale:{layer.name}"].exp()[:, None]
    if layer.bias is not None:
        w = w + layer.bias[:, None]
    return w


def _norm_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters of the model's normalisation layers (RMSNorm/LayerNorm weights and biases), by name:
    modules whose class name ends in "Norm" (LlamaRMSNorm, Qwen3RMSNorm, nn.LayerNorm, ...)."""
    out = {}
    for mname, module in model.named_modules():
        if type(module).__name__.endswith("Norm"):
            for pname, p in module.named_parameters(recurse=False):
                out[f"{mname}.{pname}" if mname else pname] = p
    return out


def _stack(samples: list[dict]) -> dict:
    """Samples as one batch, each cut to the shortest of them: one-document calibration samples differ in
    length, and padding would have to be masked out of the loss and the attention alike."""
    out = {}
    shortest = min(s["input_ids"].shape[-1] for s in samples)
    for key in samples[0]:
        vals = [s[key] for s in samples]
        out[key] = torch.cat([v[..., :shortest] for v in vals]) if torch.is_tensor(vals[0]) else vals[0]
    return out


def _kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over (unmasked) tokens of KL(teacher || student), float32."""
    t = torch.log_softmax(teacher_logits.float(), -1)
    s = torch.log_softmax(student_logits.float(), -1)
    kl = (t.exp() * (t - s)).sum(-1)  # (B, T)
    if mask is None:
        return kl.mean()
    m = mask.to(kl.dtype)
    return (kl * m).sum() / m.sum().clamp_min(1)


@contextmanager
def _tf32(device: torch.device):
    """TF32 matmuls on GPU (several times the float32 rate) while training: gradients need no more
    precision than that, and the refined values are rounded to fp16 anyway. Restored on exit."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = device.type == "cuda"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _sdpa_math():
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.MATH)
    except (ImportError, AttributeError):  # older torch: whatever SDPA picks
        return nullcontext()


def finetune_codebooks(
    model: nn.Module,
    batches: list[dict[str, torch.Tensor]],
    layers: dict[str, VQWeight],
    teacher_weights: dict[str, torch.Tensor],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    holdout: float,
    seed: int,
    device: torch.device,
    train_norms: bool = False,
    progress=None,
) -> tuple[dict[str, VQWeight], dict]:
    """Refine codebooks and row scales of `layers` (module docstring). `teacher_weights`: the float
    weights of the same Linears (the model's other tensors are shared by teacher and student). With
    `train_norms`, the weights of the model's normalisation layers learn too (the student's copies; the
    teacher keeps the originals) and the best ones are written into the model. Returns the refined layers
    (fp16 codebooks/scales, same indices) and a report (held-out KL per pass)."""
    from torch.func import functional_call

    params, prepared = _prepare(layers, device)
    norms = _norm_parameters(model) if train_norms else {}
    for n, p in norms.items():
        params[f"norm:{n}"] = p.detach().float().clone()
    for p in params.values():
        p.requires_grad_(True)
    n_hold = min(len(batches) - 1, max(1, int(round(holdout * len(batches))))) if len(batches) > 1 else 0
    train, held = batches[: len(batches) - n_hold], batches[len(batches) - n_hold :]
    gen = torch.Generator(device="cpu").manual_seed(seed + 11)
    teacher = {f"{n}.weight": w for n, w in teacher_weights.items()}
    was_training = model.training
    model.eval()  # no dropout: the student must see what inference sees
    # Only the quantization parameters learn: no gradient (time, memory, .grad left behind) for the rest.
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)

    def move(batch):
        return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}

    def student_weights():
        w = {f"{layer.name}.weight": _weight(layer, params) for layer in prepared}
        w.update({n: params[f"norm:{n}"].to(p.dtype) for n, p in norms.items()})
        return w

    def kl_of(batch, weights) -> torch.Tensor:
        b = move(batch)
        with torch.no_grad():
            t_logits = functional_call(model, teacher, args=(), kwargs={**b, "use_cache": False}).logits
        s_logits = functional_call(model, weights, args=(), kwargs={**b, "use_cache": False}).logits
        return _kl(t_logits, s_logits, b.get("attention_mask"))

    def held_kl() -> float:
        if not held:
            return math.nan
        with torch.no_grad():
            w = student_weights()
            return sum(float(kl_of(_stack(held[i : i + batch_size]), w)) for i in range(0, len(held), batch_size)) / math.ceil(len(held) / batch_size)

    opt = torch.optim.Adam(list(params.values()), lr=lr)
    history = []
    with _sdpa_math(), _tf32(device):
        best = held_kl()
        history.append({"step": 0, "heldout_kl": best})
        best_state = {k: v.detach().clone() for k, v in params.items()}
        best_step = 0
        per_pass = max(1, len(train) // batch_size)
        step = 0
        while step < steps:
            perm = torch.randperm(len(train), generator=gen).tolist()
            for i in range(per_pass):
                if step >= steps:
                    break
                chunk = [train[j] for j in perm[i * batch_size : (i + 1) * batch_size]]
                loss = kl_of(_stack(chunk), student_weights())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
            score = held_kl()
            history.append({"step": step, "heldout_kl": score, "train_kl": float(loss.detach())})
            if progress:
                progress(step, steps, f"codebook fine-tuning: held-out KL {score:.4f} (start {history[0]['heldout_kl']:.4f})")
            if not held or score < best:
                best, best_step = score, step
                best_state = {k: v.detach().clone() for k, v in params.items()}
    model.train(was_training)
    with torch.no_grad():
        for n, p in norms.items():
            p.copy_(best_state[f"norm:{n}"].to(p.dtype))
    for p in frozen:
        p.requires_grad_(True)

    out = {}
    for layer in prepared:
        vq = layer.vq
        kw = {"codebook": best_state[layer.main_key].half()}
        if layer.res_key is not None:
            kw["res_codebook"] = best_state[layer.res_key].half()
        if vq.scale is not None:
            kw["scale"] = best_state[f"log_scale:{layer.name}"].exp().half()
        out[layer.name] = replace(vq, **kw)
    report = {"steps": steps, "lr": lr, "train_norms": bool(norms), "norm_parameters": len(norms), "batch_size": batch_size,
              "train_windows": len(train), "heldout_windows": len(held), "heldout_kl_start": history[0]["heldout_kl"],
              "heldout_kl_best": best, "best_step": best_step, "history": history}
    return out, report
