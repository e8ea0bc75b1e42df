"""VPTQ fitting of one linear layer: pure functions on tensors, `fit_vptq(weight, hessian, cfg) -> VQWeight`.

Objective (second-order proxy of the layer's output error on the calibration inputs X, H = X^T X):

    min  tr((W - W_hat) H (W - W_hat)^T),   W_hat[g*v+i, j] = (C[idx[j,g], i] + R[ridx[j,g], i]) * s[g*v+i] + t[g*v+i]

Algorithm (VPTQ, "channel-independent second-order optimization"), in the GPTQ skeleton:
1. Normalise rows: W_n = (W - t) / s (optional), so vectors of different rows/layers share a codebook.
2. Codebook C by k-means on the vectors of W_n, each element weighted by diag(H)_j * s_r^2 (its cost in
   the objective when the off-diagonal of H is ignored). Shared codebooks are fitted by the caller.
3. Columns one at a time (by decreasing diag(H) with act_order), each column's N/v vectors get their
   nearest centroid; the column's error e = (w - q) / U[j, j] is pushed onto the not-yet-quantized
   columns through the upper Cholesky factor U of H^-1 (lazy in blocks of `block_size` columns).
4. Residual codebook R (optional): k-means on the errors left by pass 3, then pass 3 again choosing a
   main and a residual index per vector (greedy: main first, residual on what is left).
5. Outlier columns (optional): the most important input columns use their own per-layer codebook.
6. Centroid refinement (optional): with the indices fixed the objective is quadratic in (C, R); a few
   conjugate-gradient steps lower it further.

Names: W_f float weight, W_q its quantized reconstruction, W_e error; s, t row scale and bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compress.errors import CompressError
from compress.vptq.config import VPTQConfig
from compress.vptq.format import VQWeight, index_bits, pack_indices
from compress.vptq.kmeans import CodebookSearch, one_cpu_thread, weighted_kmeans


@dataclass(frozen=True)
class RowNorm:
    """Per-output-channel normalisation, already rounded to fp16 (what the checkpoint stores)."""

    scale: torch.Tensor | None  # (N,) fp16
    bias: torch.Tensor | None  # (N,) fp16

    def factors(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(s, t) as float32 (N,) tensors, identity where absent."""
        s = self.scale.float() if self.scale is not None else torch.ones(n, device=device)
        t = self.bias.float() if self.bias is not None else torch.zeros(n, device=device)
        return s, t


def row_norm(weight: torch.Tensor, mode: str) -> RowNorm:
    """Row scale (RMS for "scale", std for "scale_bias") and bias (mean, "scale_bias" only), in fp16."""
    if mode == "none":
        return RowNorm(None, None)
    w = weight.float()
    if mode == "scale":
        scale, bias = w.pow(2).mean(1).sqrt(), None
    elif mode == "scale_bias":
        bias = w.mean(1)
        scale = (w - bias[:, None]).pow(2).mean(1).sqrt()
        bias = bias.half()
    else:
        raise CompressError(f"unknown norm mode {mode!r}; choose none, scale or scale_bias")
    scale = scale.half()
    # An all-zero row (or one below fp16 range) would divide by zero: scale 1 quantizes it unscaled.
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return RowNorm(scale, bias)


def column_vectors(w_n: torch.Tensor, v: int, cols: torch.Tensor | None = None) -> torch.Tensor:
    """(N, K) -> (len(cols) * N/v, v): vector (j, g) = w_n[g*v:(g+1)*v, j], column-major over j then g."""
    n, k = w_n.shape
    cols_w = w_n if cols is None else w_n[:, cols]
    return cols_w.t().reshape(-1, n // v, v).reshape(-1, v)


def element_weights(hdiag: torch.Tensor, scale: torch.Tensor | None, v: int, n: int) -> torch.Tensor:
    """k-means weights matching column_vectors: diag(H)_j per vector, times s_r^2 per element if normalised.

    Returns (len(hdiag) * N/v,) without scale, else (len(hdiag) * N/v, v); normalised to mean 1.
    """
    g = n // v
    if scale is None:
        w = hdiag.float().repeat_interleave(g)
    else:
        s2 = scale.float().pow(2).reshape(g, v)  # (G, v)
        w = (hdiag.float()[:, None, None] * s2[None]).reshape(-1, v)
    return w / w.mean().clamp_min(1e-30)


def floor_hdiag(hdiag: torch.Tensor, floor: float) -> torch.Tensor:
    """diag(H) with every live entry raised to at least `floor` x the median live entry (floor 0: unchanged).

    Why: an input channel that is quiet on the calibration text gets almost no weight in the objective, so
    the error feedback parks error in its weights for free; on other text it may fire (SmolLM2's
    layers.28.mlp.down_proj: channel 1347 has 60x the mean square on WikiText that it has on C4). A
    floor bounds every weight's error whatever the calibration says about its channel."""
    if floor <= 0:
        return hdiag
    live = hdiag > 0
    if not live.any():
        return hdiag
    lo = floor * hdiag[live].median()
    return torch.where(live, hdiag.clamp_min(lo), hdiag)


def column_importance(hessian: torch.Tensor, mode: str, damp: float) -> torch.Tensor:
    """Per-input-column k-means weight: H_jj ("hessian_diag") or 1 / (H^-1)_jj ("obs")."""
    if mode == "hessian_diag":
        return hessian.diagonal().clamp_min(0)
    h = hessian.double().clone()
    k = h.shape[0]
    h[range(k), range(k)] += damp * h.diagonal().mean() + 1e-12
    return (1.0 / torch.cholesky_inverse(torch.linalg.cholesky(h)).diagonal()).float()


def inverse_hessian_factor(hessian: torch.Tensor, damp: float) -> torch.Tensor:
    """Upper Cholesky factor U of (H + damp * mean(diag H) * I)^-1, the GPTQ error-feedback operator."""
    h = hessian.float().clone()
    k = h.shape[0]
    diag = torch.arange(k, device=h.device)
    h[diag, diag] += damp * h.diagonal().mean()
    for attempt in range(6):
        try:
            chol = torch.linalg.cholesky(h)
            return torch.linalg.cholesky(torch.cholesky_inverse(chol), upper=True)
        except RuntimeError:  # torch.linalg.LinAlgError: not positive definite; damp more and retry
            h[diag, diag] += max(damp, 0.01) * 10**attempt * h.diagonal().mean()
    raise CompressError(f"the {k}x{k} Hessian is not positive definite even after dampening; raise damp (now {damp})")


@dataclass(frozen=True)
class Codebooks:
    """The codebooks one layer is quantized with (float32 copies of fp16 values) and their searchers."""

    main: torch.Tensor  # (k, v)
    res: torch.Tensor | None = None  # (kr, v)
    outlier: torch.Tensor | None = None  # (ko, v)

    def __post_init__(self):
        for name in ("main", "res", "outlier"):
            t = getattr(self, name)
            object.__setattr__(self, f"{name}_search", None if t is None else CodebookSearch(t))


def _quantize_column(w, s, t, row_w, books: Codebooks, outlier: bool, use_res: bool, beam: int = 1):
    """One column w (N,) -> (W_q column (N,), main idx (G,), residual idx (G,) or None) in the original space.

    With beam > 1 the residual is chosen jointly with the main index among the `beam` nearest main
    centroids (the greedy choice is often not the best pair)."""
    v = books.main.shape[1]
    x = ((w - t) / s).reshape(-1, v)  # (G, v) normalised vectors
    if outlier:
        idx = books.outlier_search.index(x, row_w)
        q = books.outlier[idx]
        ridx = None
    elif not use_res or beam == 1:
        idx = books.main_search.index(x, row_w)
        q = books.main[idx]
        ridx = None
        if use_res:
            ridx = books.res_search.index(x - q, row_w)
            q = q + books.res[ridx]
    else:
        g = x.shape[0]
        cand = books.main_search.topk(x, row_w, beam)  # (G, m)
        r = (x[:, None, :] - books.main[cand]).reshape(-1, v)  # (G*m, v)
        rw = None if row_w is None else row_w.repeat_interleave(beam, dim=0)
        rc = books.res_search.index(r, rw)  # (G*m,)
        e = (r - books.res[rc]).pow(2)
        e = (e if rw is None else e * rw).sum(1).reshape(g, beam)
        best = e.argmin(dim=1)  # (G,)
        idx = cand.gather(1, best[:, None])[:, 0]
        ridx = rc.reshape(g, beam).gather(1, best[:, None])[:, 0]
        q = books.main[idx] + books.res[ridx]
    # Same float32 operations as format.dequantize, so W_q here equals the decoded checkpoint exactly.
    return q.reshape(-1) * s + t, idx, ridx


def gptq_assign(
    w_f: torch.Tensor,
    u: torch.Tensor,
    norm: RowNorm,
    books: Codebooks,
    outlier_mask: torch.Tensor,
    *,
    use_res: bool,
    order: torch.Tensor,
    block_size: int,
    beam: int = 1,
):
    """Assign every vector with GPTQ error feedback; u is the factor of H permuted by `order`. Returns (main idx (K, G), res idx (K, G) or None,
    W_e (N, K) = updated weight minus its quantization, per column, the errors a residual codebook fits)."""
    n, k = w_f.shape
    v = books.main.shape[1]
    g = n // v
    s, t = norm.factors(n, w_f.device)
    row_w = None if norm.scale is None else s.pow(2).reshape(g, v)  # (G, v) element weights in the search
    w = w_f[:, order].clone()  # columns in processing order (u was computed for this order)
    idx = torch.zeros(k, g, dtype=torch.int64, device=w_f.device)
    ridx = torch.zeros(k, g, dtype=torch.int64, device=w_f.device) if use_res else None
    w_e = torch.zeros_like(w_f)
    is_out = outlier_mask[order].tolist()
    cols = order.tolist()
    # One thread on CPU for the column loop: its ops are small (~10^5 elements), so a second thread saves
    # little, and on a shared machine every parallel op can wait a scheduler slice for it (measured:
    # 60 s vs 6.8 s for one SmolLM2 gate_proj, 2 busy cores). It also makes the result independent
    # of OMP_NUM_THREADS (a matmul's bits can depend on how its columns are split over threads).
    with one_cpu_thread(w_f.device):
        _assign_columns(w, u, s, t, row_w, books, is_out, cols, use_res, beam, block_size, idx, ridx, w_e)
    return idx, ridx, w_e


def _assign_columns(w, u, s, t, row_w, books, is_out, cols, use_res, beam, block_size, idx, ridx, w_e) -> None:
    """gptq_assign's column loop (in place on w, idx, ridx, w_e)."""
    n, k = w.shape
    for b0 in range(0, k, block_size):
        b1 = min(b0 + block_size, k)
        block = w[:, b0:b1]  # view: updates land in w
        err = torch.zeros(n, b1 - b0, device=w.device)
        for c in range(b1 - b0):
            col = block[:, c]
            q, i_main, i_res = _quantize_column(col, s, t, row_w, books, is_out[b0 + c], use_res, beam)
            j = cols[b0 + c]
            idx[j] = i_main
            if i_res is not None:
                ridx[j] = i_res
            w_e[:, j] = col - q
            e = (col - q) / u[b0 + c, b0 + c]
            block[:, c + 1 :] -= e[:, None] * u[b0 + c, b0 + c + 1 : b1][None, :]
            err[:, c] = e
        w[:, b1:] -= err @ u[b0:b1, b1:]


def proxy_loss(w_f: torch.Tensor, w_q: torch.Tensor, hessian: torch.Tensor) -> float:
    """tr(W_e H W_e^T) / tr(W_f H W_f^T): relative second-order output error of the layer."""
    w_e = (w_f.float() - w_q.float()).double()
    h = hessian.double()
    den = float(((w_f.double() @ h) * w_f.double()).sum())
    return float(((w_e @ h) * w_e).sum()) / max(den, 1e-30)


def fit_vptq(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    cfg: VPTQConfig,
    *,
    codebook: torch.Tensor | None = None,
    res_codebook: torch.Tensor | None = None,
    codebook_key: str | None = None,
    res_codebook_key: str | None = None,
    vector_len: int | None = None,
    name: str = "layer",
) -> VQWeight:
    """Quantize one (N, K) weight given its (K, K) input Hessian (module docstring for the algorithm).

    codebook / res_codebook: shared (k, v) fp16 codebooks fitted by the caller (codebook scope); when None
    they are fitted here from this layer alone (with a shared main codebook given, a residual is used only
    if res_codebook is given too). vector_len overrides cfg.vector_len (indivisible layers).
    Deterministic for a given cfg.seed, inputs and device.
    """
    return fit_vptq_joint(
        [weight], hessian, cfg, codebook=codebook, res_codebook=res_codebook, codebook_key=codebook_key,
        res_codebook_key=res_codebook_key, vector_len=vector_len, names=[name],
    )[0]


def fit_vptq_joint(
    weights: list[torch.Tensor],
    hessian: torch.Tensor,
    cfg: VPTQConfig,
    *,
    codebook: torch.Tensor | None = None,
    res_codebook: torch.Tensor | None = None,
    codebook_key: str | None = None,
    res_codebook_key: str | None = None,
    vector_len: int | None = None,
    names: list[str] | None = None,
    num_res_centroids: int | None = None,
) -> list[VQWeight]:
    """fit_vptq for several layers that read the same input (q/k/v, gate/up) and so share one Hessian.

    The objective and the error feedback act on each row separately, so stacking the weights along N and
    running one column loop gives each layer what fitting it alone would, in one pass instead of several.
    Codebooks fitted here (codebook=None) and outlier columns are chosen over the stack, so callers stack
    only layers that share their codebooks and use no outliers. num_res_centroids overrides
    cfg.num_res_centroids for a residual codebook fitted here (a layer taken out of a shared scope keeps
    its scope's residual size).
    """
    names = names or [f"layer{i}" for i in range(len(weights))]
    v = vector_len or cfg.vector_len
    k = hessian.shape[0]
    for w, name in zip(weights, names):
        if w.dim() != 2 or hessian.shape != (w.shape[1], w.shape[1]):
            raise CompressError(
                f"{name}: weight {tuple(w.shape)} and Hessian {tuple(hessian.shape)} do not match; "
                "the Hessian must be (in_features, in_features)"
            )
        if w.shape[0] % v:
            raise CompressError(
                f"{name}: out_features={w.shape[0]} is not divisible by vector_len={v}; set indivisible: shrink, "
                "choose a vector_len that divides it, or add the layer to ignore"
            )
    device = weights[0].device
    w_f = torch.cat([w.detach().float() for w in weights])  # (sum N, K), a copy
    n = w_f.shape[0]
    h = hessian.detach().float().clone()
    hdiag = h.diagonal().clone()
    dead = hdiag <= 0  # inputs that were always zero: any weight works, 0 quantizes cheapest
    h[dead, dead] = 1.0
    w_f[:, dead] = 0.0
    if cfg.hdiag_floor > 0:  # quiet channels still bound their weights' error (floor_hdiag)
        hdiag = floor_hdiag(hdiag, cfg.hdiag_floor)
        h.diagonal().copy_(torch.where(dead, h.diagonal(), hdiag))
    num_res = cfg.num_res_centroids if num_res_centroids is None else num_res_centroids
    # Shared codebooks given: a residual exactly when one is given (res_centroids_by_type may drop it).
    use_res = res_codebook is not None if codebook is not None else num_res > 0

    norm = row_norm(w_f, cfg.norm)
    s, t = norm.factors(n, device)
    w_n = (w_f - t[:, None]) / s[:, None]

    n_out = min(cfg.outlier_cols, k)
    outlier_mask = torch.zeros(k, dtype=torch.bool, device=device)
    if n_out:
        importance = hdiag.clamp_min(0) * w_f.pow(2).sum(0)
        outlier_mask[torch.topk(importance, n_out).indices] = True
    regular = (~outlier_mask).nonzero().flatten()
    outlier_cols = outlier_mask.nonzero().flatten()

    col_weight = column_importance(h, cfg.kmeans_weight, cfg.damp) * (~dead)  # dead columns carry no cost

    def fit_book(cols: torch.Tensor, size: int, data: torch.Tensor, seed_offset: int) -> torch.Tensor:
        vecs = column_vectors(data, v, cols)
        wts = element_weights(col_weight[cols], norm.scale, v, n)
        c = weighted_kmeans(vecs, size, wts, iters=cfg.kmeans_iters, seed=cfg.seed + seed_offset, max_samples=cfg.kmeans_max_samples)
        return c.half()

    main = codebook.to(device) if codebook is not None else fit_book(regular, cfg.num_centroids, w_n, 0)
    out_book = fit_book(outlier_cols, cfg.num_outlier_centroids, w_n, 2) if n_out else None
    books = Codebooks(main.float(), None, None if out_book is None else out_book.float())

    order = torch.argsort(hdiag, descending=True, stable=True) if cfg.act_order else torch.arange(k, device=device)
    u = inverse_hessian_factor(h[order][:, order], cfg.damp)  # the factor must be of the permuted H

    res = None
    if use_res:
        if res_codebook is not None:
            res = res_codebook.to(device)
        else:
            # Pass 1 with the main codebook alone: its per-column errors are what the residual must fit.
            _, _, w_e = gptq_assign(w_f, u, norm, books, outlier_mask, use_res=False, order=order, block_size=cfg.block_size)
            res = fit_book(regular, num_res, w_e / s[:, None], 1)
        books = Codebooks(books.main, res.float(), books.outlier)
    idx, ridx, _ = gptq_assign(
        w_f, u, norm, books, outlier_mask, use_res=use_res, order=order, block_size=cfg.block_size, beam=cfg.res_beam
    )

    if cfg.rescale_rows and norm.scale is not None:
        norm = rescale_rows(w_f, h, norm, books, idx, ridx, outlier_mask, gain=cfg.row_gain)
    out = []
    row = 0
    for w in weights:
        rows = slice(row, row + w.shape[0])
        vecs = slice(row // v, (row + w.shape[0]) // v)  # vector slots g of this layer
        part_norm = RowNorm(None if norm.scale is None else norm.scale[rows], None if norm.bias is None else norm.bias[rows])
        vq = _pack(
            w.shape, v, main, idx[:, vecs], res, None if ridx is None else ridx[:, vecs], part_norm, outlier_cols,
            out_book, codebook_key, res_codebook_key,
        )
        if cfg.refine_iters and codebook is None and res_codebook is None and len(weights) == 1:
            vq = with_codebooks(vq, *refine_codebooks([RefineTerm(w_f[rows], h, vq)], cfg.refine_iters))
        out.append(with_stats(vq, proxy_loss=proxy_loss(w_f[rows], vq.dequantize(torch.float32), h)))
        row += w.shape[0]
    return out


def rescale_rows(w_f, h, norm: RowNorm, books: Codebooks, idx, ridx, outlier_mask, gain: str = "ls") -> RowNorm:
    """Least-squares row scales for the chosen indices: with Q the decoded normalised weight (centroid
    sums), row r's loss (w_r - t_r - s_r q_r) H (...)^T is a parabola in s_r, minimal at
    s_r = (w_r - t_r) H q_r^T / q_r H q_r^T. The indices were chosen under the RMS scale; refitting s_r
    afterwards only lowers each row's loss (kept per row only where it does, after fp16 rounding).

    gain="norm": s_r = sqrt((w_r - t_r) H (.)^T / q_r H q_r^T) instead, the row's output energy of the float
    row. The least-squares reconstruction is a projection, shorter than the float row by exactly its error
    (outputs shrink by 1 - loss); through 30 blocks that bias is coherent (measured on SmolLM2 blocks 0-3,
    a per-row norm match after the fact: PPL 26.80 -> 26.51, the least-squares refit: unchanged)."""
    n, k = w_f.shape
    v = books.main.shape[1]
    vec = books.main[idx]  # (K, G, v)
    if ridx is not None:
        vec = vec + books.res[ridx]
    if outlier_mask.any():
        vec[outlier_mask] = books.outlier[idx[outlier_mask]]
    q = vec.reshape(k, n).t()  # (N, K) normalised reconstruction
    s, t = norm.factors(n, w_f.device)
    target = w_f - t[:, None]
    qh = q @ h
    num = (target * qh).sum(1)
    den = (q * qh).sum(1)
    if gain == "norm":
        energy = (target * (target @ h)).sum(1)
        fresh = torch.where(den > 0, (energy.clamp_min(0) / den.clamp_min(1e-30)).sqrt(), s).half()
        fresh = torch.where(fresh.float() > 0, fresh, norm.scale)
        return RowNorm(fresh, norm.bias)
    fresh = torch.where(den > 0, num / den.clamp_min(1e-30), s).half()
    fresh = torch.where(fresh.float() > 0, fresh, norm.scale)  # a sign flip or underflow: keep the RMS scale

    def row_loss(scale: torch.Tensor) -> torch.Tensor:
        e = target - scale.float()[:, None] * q
        return ((e @ h) * e).sum(1)

    better = row_loss(fresh) < row_loss(norm.scale)
    return RowNorm(torch.where(better, fresh, norm.scale), norm.bias)


def with_stats(vq: VQWeight, **stats) -> VQWeight:
    from dataclasses import replace

    return replace(vq, extra={**vq.extra, **stats})


def with_codebooks(vq: VQWeight, main: torch.Tensor, res: torch.Tensor | None) -> VQWeight:
    """The same layer decoded with other (e.g. refined) fp16 codebooks."""
    from dataclasses import replace

    return replace(vq, codebook=main, res_codebook=res if vq.res_codebook is not None else None)


def _pack(shape, v, main, idx, res, ridx, norm: RowNorm, outlier_cols, out_book, key, res_key) -> VQWeight:
    b = index_bits(main.shape[0])
    outlier_kw = {}
    if outlier_cols.numel():
        ob = index_bits(out_book.shape[0])
        idx = idx.clone()
        oidx = idx[outlier_cols]  # the outlier search stored its indices in the main slots
        idx[outlier_cols] = 0
        if ridx is not None:
            ridx = ridx.clone()
            ridx[outlier_cols] = 0
        outlier_kw = dict(
            outlier_cols=outlier_cols.to(torch.int32),
            outlier_codebook=out_book,
            outlier_indices=pack_indices(oidx, ob),
            outlier_index_bits=ob,
        )
    res_kw = {}
    if res is not None:
        rb = index_bits(res.shape[0])
        res_kw = dict(res_codebook=res, res_indices=pack_indices(ridx, rb), res_index_bits=rb, res_codebook_key=res_key)
    return VQWeight(
        shape=(int(shape[0]), int(shape[1])),
        vector_len=v,
        codebook=main,
        indices=pack_indices(idx, b),
        index_bits=b,
        scale=norm.scale,
        bias=norm.bias,
        codebook_key=key,
        **res_kw,
        **outlier_kw,
    )


@dataclass(frozen=True)
class RefineTerm:
    """One layer's share of a centroid-refinement problem: float weight, Hessian, current quantization."""

    w_f: torch.Tensor  # (N, K)
    hessian: torch.Tensor  # (K, K)
    vq: VQWeight


def refine_codebooks(terms: list[RefineTerm], iters: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Conjugate gradient on the (main, residual) codebooks shared by `terms`, indices fixed.

    Minimises sum_layers tr(W_e H W_e^T) / tr(W_f H W_f^T), which is quadratic in the centroids, so CG
    converges without a learning rate; Hessian-vector products come from differences of autograd
    gradients. Returns fp16 (main, residual-or-None) codebooks.
    """
    from compress.vptq.format import unpack_indices

    first = terms[0].vq
    main0 = first.codebook.float()
    res0 = first.res_codebook.float() if first.res_codebook is not None else None
    kc = main0.shape[0]
    theta0 = main0.reshape(-1) if res0 is None else torch.cat([main0.reshape(-1), res0.reshape(-1)])
    v = first.vector_len

    prepared = []
    for term in terms:
        vq = term.vq
        n, k = vq.shape
        g = n // v
        idx = unpack_indices(vq.indices, vq.index_bits, g)
        ridx = unpack_indices(vq.res_indices, vq.res_index_bits, g) if vq.res_indices is not None else None
        s, t = RowNorm(vq.scale, vq.bias).factors(n, idx.device)
        keep = torch.ones(k, dtype=torch.bool, device=idx.device)
        fixed = torch.zeros(k, g, v, device=idx.device)
        if vq.outlier_cols is not None and vq.outlier_cols.numel():
            oc = vq.outlier_cols.long()
            keep[oc] = False
            oidx = unpack_indices(vq.outlier_indices, vq.outlier_index_bits, g)
            fixed[oc] = vq.outlier_codebook.float()[oidx]
        h = term.hessian.float()
        den = float(((term.w_f.float() @ h) * term.w_f.float()).sum()).__abs__() or 1.0
        prepared.append((term.w_f.float(), h, idx, ridx, s, t, keep, fixed, den))

    def grad(theta: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():  # callers (the pipeline stage) run under no_grad
            return _grad(theta.detach().requires_grad_(True))

    def _grad(theta: torch.Tensor) -> torch.Tensor:
        main = theta[: kc * v].reshape(kc, v)
        res = theta[kc * v :].reshape(-1, v) if res0 is not None else None
        total = 0.0
        for w_f, h, idx, ridx, s, t, keep, fixed, den in prepared:
            vec = main[idx]  # (K, G, v)
            if res is not None and ridx is not None:
                vec = vec + res[ridx]
            vec = torch.where(keep[:, None, None], vec, fixed)
            w_q = vec.reshape(idx.shape[0], -1).t() * s[:, None] + t[:, None]  # (N, K)
            w_e = w_f - w_q
            total = total + ((w_e @ h) * w_e).sum() / den
        (gr,) = torch.autograd.grad(total, theta)
        return gr.detach().double()

    # CG on A theta = b with grad(theta) = 2 (A theta - b): A p = (grad(p) - grad(0)) / 2.
    g0 = grad(torch.zeros_like(theta0))
    theta = theta0.double()
    r = -grad(theta0)  # = 2 (b - A theta), the factor 2 cancels in alpha and beta
    p = r.clone()
    rr = float(r @ r)
    for _ in range(iters):
        if rr <= 1e-30:
            break
        ap = grad(p.float()) - g0  # = 2 A p
        pap = float(p @ ap)
        if pap <= 0:
            break
        alpha = rr / pap
        theta = theta + alpha * p
        r = r - alpha * ap
        rr_new = float(r @ r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    theta = theta.float()
    main = theta[: kc * v].reshape(kc, v).half()
    res = theta[kc * v :].reshape(-1, v).half() if res0 is not None else None
    return main, res
