"""The VPTQ pipeline stage: `apply_vptq(model, calibration_batches, config) -> VPTQResult`.

Orchestration only (the math is in fit.py / kmeans.py / equalize.py):
0. Optional input-column equalisation folded into the model (`equalize` > 0; function unchanged).
1. Shared codebooks (scope "model" / "layer_type"): one calibration pass through the float model collects
   diag(H) of every targeted Linear; the codebooks of each scope are fitted on all member layers' vectors.
2. Sequential pass, decoder block by decoder block (GPTQ's pipeline): the block's inputs come from the
   already-quantized blocks before it; hooks accumulate each targeted Linear's input Hessian
   H = X^T X / tokens (padding excluded); every Linear is fitted (`fit_vptq`) and its weight replaced by
   the reconstruction, then the block is re-run to give the next block its inputs.
3. Optional centroid refinement of shared codebooks over all their layers at the end (proxy objective).
4. Optional end-to-end refinement of codebooks and row scales by distillation (finetune.py).

The model keeps working as a plain float model (weights = dequantized reconstruction), so perplexity can
be measured on it directly; the packed tensors are returned for `checkpoint.save`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from compress.errors import CompressError
from compress.vptq.config import VPTQConfig, VPTQModifierConfig, scope_projection
from compress.vptq.fit import (
    RefineTerm, column_vectors, element_weights, fit_vptq_joint, floor_hdiag, proxy_loss, refine_codebooks, row_norm,
    with_codebooks,
)
from compress.vptq.equalize import equalize_model
from compress.vptq.finetune import finetune_codebooks
from compress.vptq.format import VQWeight
from compress.vptq.kmeans import nearest, weighted_kmeans

Progress = Callable[[int, int, str], None]  # (step, total, message)


@dataclass
class VPTQResult:
    """What apply_vptq produced: packed layers (by module name), the config, sizes and timings."""

    layers: dict[str, VQWeight]
    config: VPTQConfig
    targets: list[str]
    ignore: list[str]
    fit_seconds: float
    device: str
    stats: dict[str, dict] = field(default_factory=dict)  # per layer: proxy_loss, vector_len
    folds: dict[str, list[str]] = field(default_factory=dict)  # equalisation folds per block index
    finetune: dict = field(default_factory=dict)  # end-to-end refinement report (held-out KL per pass)

    def size_report(self) -> dict:
        """Bits per quantized weight with codebooks counted once per scope (each shared codebook once)."""
        weights = sum(vq.shape[0] * vq.shape[1] for vq in self.layers.values())
        per_layer = sum(vq.index_storage_bits() for vq in self.layers.values())
        books: dict[str, int] = {}
        for name, vq in self.layers.items():
            books.update(vq.codebook_bits(name))
        book_bits = sum(books.values())
        return {
            "quantized_weights": weights,
            "index_and_norm_bits": per_layer,
            "codebook_bits": book_bits,
            "num_codebooks": len(books),
            "bits_per_weight": (per_layer + book_bits) / max(weights, 1),
            "bits_per_weight_without_codebooks": per_layer / max(weights, 1),
        }


def _matches(name: str, module: nn.Module, patterns: list[str]) -> bool:
    """llmcompressor-style target matching: class name, exact/suffix module name, or 're:<regex>' on the name."""
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif p == type(module).__name__ or name == p or name.endswith("." + p):
            return True
    return False


def target_linears(model: nn.Module, targets: list[str], ignore: list[str]) -> dict[str, nn.Linear]:
    """Targeted nn.Linear modules by name, ignore applied."""
    found = {
        name: m
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and _matches(name, m, targets) and not _matches(name, m, ignore)
    }
    if not found:
        raise CompressError(f"VPTQ found no Linear modules for targets={targets} ignore={ignore}; check `targets` in the recipe")
    return found


def decoder_blocks(model: nn.Module, linears: dict[str, nn.Linear]) -> tuple[str, nn.ModuleList]:
    """The ModuleList of decoder blocks holding the targeted Linears (e.g. model.layers)."""
    best = None
    for name, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) and (best is None or len(m) > len(best[1])):
            if any(t.startswith(name + ".") for t in linears):
                best = (name, m)
    if best is None:
        raise CompressError("VPTQ needs a decoder-layer ModuleList (e.g. model.layers) holding the targeted Linears; none found")
    outside = [t for t in linears if not t.startswith(best[0] + ".")]
    if outside:
        raise CompressError(f"VPTQ target {outside[0]} lies outside the decoder layers {best[0]}; add it to `ignore`")
    return best


def vector_len_for(name: str, n: int, cfg: VPTQConfig) -> int:
    """cfg.vector_len, or for indivisible layers the largest divisor of N below it (indivisible='shrink')."""
    v = cfg.vector_len
    if n % v == 0:
        return v
    if cfg.indivisible == "error":
        raise CompressError(
            f"{name}: out_features={n} is not divisible by vector_len={v}; set indivisible: shrink "
            "(a shorter vector for this layer), another vector_len, or add the layer to ignore"
        )
    return max(d for d in range(1, v) if n % d == 0)


def scope_key(name: str, v: int, cfg: VPTQConfig) -> str | None:
    """Which shared codebook a layer uses (None: its own). Layers of another vector length never share with v."""
    if cfg.scope == "layer":
        return None
    base = "model" if cfg.scope == "model" else re.sub(r"^.*?\.\d+\.", "", name)  # 'mlp.down_proj'
    return base if v == cfg.vector_len else f"{base}.v{v}"


class _Stop(Exception):
    """Raised by the capture hook to end a forward pass at the first decoder block."""


def _move_batch(batch: dict, device: torch.device) -> dict:
    return {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}


def _tree_to(x, device):
    if torch.is_tensor(x):
        return x.to(device)
    if isinstance(x, tuple):
        return tuple(_tree_to(e, device) for e in x)
    if isinstance(x, list):
        return [_tree_to(e, device) for e in x]
    if isinstance(x, dict):
        return {k: _tree_to(e, device) for k, e in x.items()}
    return x


def _hidden(out):
    return out[0] if isinstance(out, (tuple, list)) else out


class _HessianHooks:
    """Forward pre-hooks accumulating X^T X (full) or sum(X^2) (diag) of Linear inputs, padding excluded."""

    def __init__(self, modules: dict[str, nn.Linear], diag_only: bool):
        self.sums: dict[str, torch.Tensor] = {}
        self.tokens: dict[str, int] = {n: 0 for n in modules}
        self.mask: torch.Tensor | None = None  # (B, T) bool of the batch being run
        self.diag_only = diag_only
        self.handles = [m.register_forward_pre_hook(self._hook(n)) for n, m in modules.items()]

    def _hook(self, name: str):
        def hook(module, args):
            x = args[0].detach()
            if self.mask is not None and x.shape[:-1] == self.mask.shape:
                x = x[self.mask]
            x = x.reshape(-1, x.shape[-1]).float()  # (tokens, K)
            acc = x.pow(2).sum(0) if self.diag_only else x.t() @ x
            self.sums[name] = acc if name not in self.sums else self.sums[name] + acc
            self.tokens[name] += x.shape[0]

        return hook

    def result(self, name: str) -> torch.Tensor:
        if name not in self.sums or self.tokens[name] == 0:
            raise CompressError(f"{name} saw no calibration tokens; check the calibration batches' attention_mask")
        return self.sums[name] / self.tokens[name]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _token_mask(batch: dict) -> torch.Tensor | None:
    m = batch.get("attention_mask")
    return None if m is None else m.bool()


def _check_batches(batches: list[dict]) -> None:
    if not batches:
        raise CompressError("VPTQ needs calibration batches; got an empty list (set compress.calibration.num_samples > 0)")
    for i, b in enumerate(batches):
        if "input_ids" not in b:
            raise CompressError(f"calibration batch {i} has no input_ids (keys: {sorted(b)}); pass tokenized batches")


def _layer_vectors(w: torch.Tensor, hdiag: torch.Tensor, v: int, cfg: VPTQConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's normalised vectors (K*N/v, v) and their k-means element weights (mean 1 per layer)."""
    norm = row_norm(w, cfg.norm)
    s = norm.scale.float()[:, None] if norm.scale is not None else 1.0
    t = norm.bias.float()[:, None] if norm.bias is not None else 0.0
    ew = element_weights(floor_hdiag(hdiag.clamp_min(0), cfg.hdiag_floor), norm.scale, v, w.shape[0])
    return column_vectors((w - t) / s, v), (ew if ew.dim() == 2 else ew[:, None].expand(-1, v))


# Vectors per layer on which the own-codebook criterion is measured (evenly strided, deterministic).
_DISTORTION_SAMPLES = 2**14


def _relative_distortion(x: torch.Tensor, wt: torch.Tensor, main: torch.Tensor, res: torch.Tensor | None) -> float:
    """sum w (x - q)^2 / sum w x^2 of vectors x under (main [+ residual]) codebooks, greedy nearest choice:
    how well a shared codebook fits one layer, before any error feedback."""
    step = max(1, x.shape[0] // _DISTORTION_SAMPLES)
    x, wt = x[::step], wt[::step]
    idx, _ = nearest(x, main.float(), wt)
    q = main.float()[idx]
    if res is not None:
        ridx, _ = nearest(x - q, res.float(), wt)
        q = q + res.float()[ridx]
    return float((wt * (x - q).pow(2)).sum() / (wt * x.pow(2)).sum().clamp_min(1e-30))


@torch.no_grad()
def _fit_shared_codebooks(model, batches, linears, vlens, cfg, device, progress, report: dict | None = None) -> dict[str, tuple]:
    """scope != 'layer': diag(H) from the float model, then one (main, residual) codebook per scope key.

    With cfg.own_codebooks > 0, every member layer's relative distortion under its scope's codebooks is
    measured (weights and calibration diag(H) only); the layers furthest above their scope's median
    (ratio >= cfg.own_codebook_ratio, at most cfg.own_codebooks of them) are marked for codebooks of their
    own and the scopes they leave are refitted without them. `report` (if given) receives
    {"distortion": {layer: ratio to its scope's median}, "own": [layers]}.
    """
    hooks = _HessianHooks(linears, diag_only=True)
    body = getattr(model, "base_model", model)  # the decoder without the LM head: its logits are not needed
    try:
        for batch in batches:
            b = _move_batch(batch, device)
            hooks.mask = _token_mask(b)
            body(**b, use_cache=False)
    finally:
        hooks.remove()
    groups: dict[str, list[str]] = {}
    for name in linears:
        groups.setdefault(scope_key(name, vlens[name], cfg), []).append(name)
    unknown = set(cfg.res_centroids_by_type) - {scope_projection(k) for k in groups}
    if unknown:
        raise CompressError(
            f"res_centroids_by_type names {sorted(unknown)} match no codebook scope here "
            f"({', '.join(sorted(groups))}); use projection names such as up_proj, with scope layer_type"
        )

    def data(name):
        return _layer_vectors(linears[name].weight.detach().float().to(device), hooks.result(name).to(device), vlens[name], cfg)

    def fit_scope(gi: int, key: str, names: list[str]) -> tuple:
        v = vlens[names[0]]
        parts = [data(name) for name in names]
        x, wt = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        del parts
        if cfg.kmeans_max_samples is not None and x.shape[0] > cfg.kmeans_max_samples:
            # Subsample once for both codebooks, so the residual search below costs a sample, not the model.
            gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 7)
            keep = torch.randperm(x.shape[0], generator=gen)[: cfg.kmeans_max_samples].sort().values.to(device)
            x, wt = x[keep], wt[keep]
        if progress:
            progress(gi, len(groups), f"k-means {cfg.num_centroids} x {v} on {x.shape[0]} vectors ({key})")
        weights = wt if cfg.norm != "none" else wt[:, 0]
        main = weighted_kmeans(x, cfg.num_centroids, weights, iters=cfg.kmeans_iters, seed=cfg.seed).half()
        res = None
        num_res = cfg.res_centroids_for(key)  # res_centroids_by_type may resize or drop this scope's residual
        if num_res:
            idx, _ = nearest(x, main.float(), weights)
            r = x - main.float()[idx]
            res = weighted_kmeans(r, num_res, weights, iters=cfg.kmeans_iters, seed=cfg.seed + 1).half()
        return main, res

    books = {key: fit_scope(gi, key, names) for gi, (key, names) in enumerate(sorted(groups.items()))}
    if cfg.own_codebooks:
        ratio: dict[str, float] = {}
        for key, names in groups.items():
            dist = {name: _relative_distortion(*data(name), *books[key]) for name in names}
            med = sorted(dist.values())[len(dist) // 2]
            ratio.update({name: d / max(med, 1e-30) for name, d in dist.items()})
        ranked = sorted((r, name) for name, r in ratio.items() if r >= cfg.own_codebook_ratio)[::-1]
        own = sorted(name for _, name in ranked[: cfg.own_codebooks])
        for gi, (key, names) in enumerate(sorted(groups.items())):
            rest = [n for n in names if n not in own]
            if len(rest) < len(names) and rest:  # the scope's codebook no longer has to cover the atypical layers
                books[key] = fit_scope(gi, key, rest)
        if report is not None:
            report.update(distortion=ratio, own=own)
    return books


def _joint_groups(
    mine: dict[str, nn.Linear], hooks: _HessianHooks, vlens: dict, cfg: VPTQConfig, own=frozenset()
) -> list[list[str]]:
    """Layers of one block fitted together: same input (bit-identical Hessian: q/k/v, gate/up), same
    shared codebook, no outliers (see fit_vptq_joint). Otherwise one layer per group (layers in `own`
    have codebooks of their own: always alone)."""
    groups: list[list[str]] = []
    for name in mine:
        key = None if name in own else scope_key(name, vlens[name], cfg)
        for g in groups:
            head = g[0]
            if (
                key is not None and cfg.outlier_cols == 0 and head not in own and scope_key(head, vlens[head], cfg) == key
                and vlens[head] == vlens[name] and torch.equal(hooks.result(head), hooks.result(name))
            ):
                g.append(name)
                break
        else:
            groups.append([name])
    return groups


def _fit_group(group, linears, hooks, vlens, cfg, shared, own=frozenset()) -> dict[str, VQWeight]:
    v = vlens[group[0]]
    key = scope_key(group[0], v, cfg)
    num_res = cfg.res_centroids_for(key) if key is not None else cfg.num_res_centroids
    if group[0] in own:  # codebooks of its own, sized as its scope's (residual included)
        key = None
    main, res = shared.get(key, (None, None)) if key is not None else (None, None)
    fitted = fit_vptq_joint(
        [linears[n].weight.detach() for n in group], hooks.result(group[0]), cfg,
        codebook=main, res_codebook=res, codebook_key=key, res_codebook_key=key if res is not None else None,
        vector_len=v, names=group, num_res_centroids=num_res,
    )
    return dict(zip(group, fitted))


def _resolve(config: VPTQModifierConfig | VPTQConfig) -> tuple[VPTQConfig, list[str], list[str]]:
    if isinstance(config, VPTQModifierConfig):
        return config.vptq(), list(config.targets), list(config.ignore)
    if isinstance(config, VPTQConfig):
        return config, ["Linear"], ["lm_head"]
    raise CompressError(f"apply_vptq: config must be a VPTQModifierConfig or VPTQConfig, got {type(config).__name__}")


def apply_vptq(
    model: nn.Module,
    calibration_batches: list[dict[str, torch.Tensor]],
    config: VPTQModifierConfig | VPTQConfig,
    progress=None,
    device: str | torch.device | None = None,
) -> VPTQResult:
    """Quantize the targeted Linears of `model` in place (weights := reconstruction); return the packed layers.

    calibration_batches: dicts with input_ids (B, T) and optional attention_mask (B, T).
    progress: None, a callable (done, total, message), or an object with a `callback(description)` context
        manager yielding such a callable (compress.progress.Progress).
    device: where the work runs (default: CUDA if available, else CPU); the model is moved there and
    stays there.
    """
    if progress is None or callable(progress):
        return _apply(model, calibration_batches, config, progress, device)
    if hasattr(progress, "callback"):
        with progress.callback("VPTQ") as update:
            return _apply(model, calibration_batches, config, update, device)
    raise CompressError(f"apply_vptq: progress must be a callable (done, total, message) or have .callback(); got {type(progress).__name__}")


@torch.no_grad()
def _apply(model, calibration_batches, config, progress: Progress | None, device) -> VPTQResult:
    cfg, targets, ignore = _resolve(config)
    _check_batches(calibration_batches)
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    model.eval()
    model.to(dev)
    linears = target_linears(model, targets, ignore)
    blocks_name, blocks = decoder_blocks(model, linears)
    vlens = {name: vector_len_for(name, m.out_features, cfg) for name, m in linears.items()}
    # Reparametrise first (function unchanged): codebooks, Hessians and the sequential pass all see the
    # equalised weights.
    folds = equalize_model(blocks, linears, cfg.equalize) if cfg.equalize > 0 else {}
    # The float weights the end-to-end refinement distils from (after equalisation: same function).
    teacher = {n: m.weight.detach().clone() for n, m in linears.items()} if cfg.finetune_steps else {}
    own_report: dict = {}
    shared = (
        _fit_shared_codebooks(model, calibration_batches, linears, vlens, cfg, dev, progress, own_report)
        if cfg.scope != "layer" else {}
    )
    own = frozenset(own_report.get("own", ()))

    # Inputs of block 0 for every batch: stop the forward there and keep (hidden_states, kwargs).
    captured: list[tuple[torch.Tensor, dict]] = []

    def grab(module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("hidden_states")
        captured.append((hidden, {k: v for k, v in kwargs.items() if k != "hidden_states"}))
        raise _Stop

    handle = blocks[0].register_forward_pre_hook(grab, with_kwargs=True)
    masks = []
    try:
        for batch in calibration_batches:
            b = _move_batch(batch, dev)
            masks.append(_token_mask(b))
            try:
                model(**b, use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()

    layers: dict[str, VQWeight] = {}
    stats: dict[str, dict] = {}
    refine_terms: dict[str, list[tuple[str, RefineTerm]]] = {}
    total = len(linears)
    for bi, block in enumerate(blocks):
        prefix = f"{blocks_name}.{bi}."
        mine = {n: m for n, m in linears.items() if n.startswith(prefix)}
        if mine:
            hooks = _HessianHooks(mine, diag_only=False)
            try:
                for (hidden, kwargs), mask in zip(captured, masks):
                    hooks.mask = mask
                    block(hidden, **kwargs)
            finally:
                hooks.remove()
            for group in _joint_groups(mine, hooks, vlens, cfg, own):
                fitted = _fit_group(group, linears, hooks, vlens, cfg, shared, own)
                for name, vq in fitted.items():
                    module = linears[name]
                    key = vq.codebook_key
                    if cfg.refine_iters and key is not None:
                        refine_terms.setdefault(key, []).append(
                            (name, RefineTerm(module.weight.detach().float().clone(), hooks.result(name), vq))
                        )
                    module.weight.data.copy_(vq.dequantize(module.weight.dtype))
                    layers[name] = vq.to("cpu")
                    stats[name] = {"proxy_loss": vq.extra.get("proxy_loss"), "vector_len": vq.vector_len}
                    if name in own_report.get("distortion", {}):
                        stats[name]["distortion_ratio"] = own_report["distortion"][name]
                        stats[name]["own_codebook"] = name in own
                    if progress:
                        progress(len(layers), total, f"{name}: proxy loss {vq.extra.get('proxy_loss', float('nan')):.4f}")
        # Next block's inputs come from this block with its quantized weights.
        captured = [(_hidden(block(hidden, **kwargs)), kwargs) for hidden, kwargs in captured]

    for key, terms in refine_terms.items():
        main, res = refine_codebooks([t for _, t in terms], cfg.refine_iters)
        for name, term in terms:
            vq = with_codebooks(term.vq, main, res)
            linears[name].weight.data.copy_(vq.dequantize(linears[name].weight.dtype))
            layers[name] = vq.to("cpu")
            stats[name]["proxy_loss_before_refine"] = stats[name]["proxy_loss"]
            stats[name]["proxy_loss"] = proxy_loss(term.w_f, vq.dequantize(torch.float32), term.hessian)
    finetune_report: dict = {}
    if cfg.finetune_steps:
        with torch.enable_grad():
            tuned, finetune_report = finetune_codebooks(
                model, calibration_batches, layers, teacher, steps=cfg.finetune_steps, lr=cfg.finetune_lr,
                batch_size=cfg.finetune_batch, holdout=cfg.finetune_holdout, seed=cfg.seed, device=dev,
                train_norms=cfg.finetune_norms, progress=progress,
            )
        del teacher
        for name, vq in tuned.items():
            linears[name].weight.data.copy_(vq.dequantize(linears[name].weight.dtype))
            layers[name] = vq.to("cpu")
    return VPTQResult(
        layers=layers, config=cfg, targets=targets, ignore=ignore,
        fit_seconds=time.perf_counter() - start, device=str(dev), stats=stats, folds=folds, finetune=finetune_report,
    )
