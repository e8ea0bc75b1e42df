"""Weighted k-means and weighted nearest-centroid search, vectorized in torch (CPU or GPU), deterministic.

Objective (per-element weights w >= 0, e.g. diag(H)_j * s_r^2 for element r of a vector of column j):

    min_C  sum_n sum_i w[n, i] * (x[n, i] - C[a(n), i])^2,   a(n) = argmin_c sum_i w[n, i] (x[n, i] - C[c, i])^2

Nearest search expands the square: argmin_c = argmax_c  2 (w * x) . c  -  w . c^2 , two (n, v) x (v, k)
matrix products per chunk, so k = 65536 runs as matmuls. Centroid sums use a stable sort plus a float64
cumulative sum instead of scatter-add, because scatter-add on CUDA uses atomics whose float order (and so
the result bytes) changes from run to run.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from compress.errors import CompressError

# Score-matrix elements per chunk of the nearest search: 64 MB of float32 on CPU, 1 GB on GPU.
_CHUNK_ELEMS = {"cpu": 2**24, "cuda": 2**28}


def _chunk_rows(device: torch.device, k: int) -> int:
    return max(1, _CHUNK_ELEMS.get(device.type, 2**24) // k)


@contextmanager
def one_cpu_thread(device: torch.device):
    """torch on one thread inside the block when `device` is the CPU (restored after): for loops of many small
    ops, where waiting for a second OpenMP thread on a busy machine costs more than it saves."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# Block width of _row_max: a divisor of every power-of-two codebook size from 64 up.
_MAX_BLOCK = 64


def _row_max(score: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """score.max(dim=1) bit for bit (values, and the FIRST index among equal maxima), faster on CPU.

    Why: on CPU `max(dim=1)` with indices is a scalar loop, ~5-10x slower than the vectorised `amax`
    (1.2-1.6 vs 0.17-0.5 s per 2^30 elements, 2 shared cores), and it was most of a k-means step. So:
    amax per block of 64 columns, amax of those, the first block holding the row max, and the first
    position of the max inside that block; all exact comparisons, so ties resolve as max(dim=1) does.
    (A row with NaN is not supported: scores here are finite.)"""
    rows, k = score.shape
    if k % _MAX_BLOCK or k < 8 * _MAX_BLOCK or score.device.type != "cpu":
        return score.max(dim=1)  # small k (residual codebooks): max(dim) is as fast (0.28 vs 0.51 ms at 1536 x 128)
    blocks = score.view(rows, k // _MAX_BLOCK, _MAX_BLOCK)
    block_max = blocks.amax(2)  # (rows, k / 64)
    best = block_max.amax(1)
    first = _first_true(block_max == best[:, None])  # the first block holding the row max
    inner = _first_true(blocks[torch.arange(rows, device=score.device), first] == best[:, None])
    return best, first * _MAX_BLOCK + inner


def _first_true(mask: torch.Tensor) -> torch.Tensor:
    """Column of the first True per row (each row has one): an amax over mask * (m, m-1, ..., 1), because
    argmax is a scalar loop on CPU (~9 ms vs <1 ms for a 4096 x 64 mask)."""
    m = mask.shape[1]
    rev = torch.arange(m, 0, -1, dtype=torch.int32, device=mask.device)
    return m - (mask * rev).amax(1).long()


def _row_topk(score: torch.Tensor, m: int) -> torch.Tensor:
    """Indices of the m largest scores per row, largest first: the values torch.topk returns, faster on CPU.

    Why: topk over 4096 columns for the ~100 rows of one column of the fit took ~7 ms of its ~10 ms (one
    CPU thread). The m largest lie in the m blocks of 64 with the largest block maxima (any other block's
    max is below m larger elements), so topk runs on block maxima and then on m * 64 candidates. The same
    multiset of values as torch.topk; among exactly equal scores (duplicate centroids) the index chosen
    may differ, which decodes to the same weights."""
    rows, k = score.shape
    nb = k // _MAX_BLOCK
    if k % _MAX_BLOCK or nb <= 2 * m or score.device.type != "cpu":
        return score.topk(m, dim=1).indices
    blocks = score.view(rows, nb, _MAX_BLOCK)
    top_blocks = blocks.amax(2).topk(m, dim=1).indices  # (rows, m)
    cand = blocks.gather(1, top_blocks[:, :, None].expand(-1, -1, _MAX_BLOCK)).reshape(rows, m * _MAX_BLOCK)
    pos = cand.topk(m, dim=1).indices
    return top_blocks.gather(1, pos // _MAX_BLOCK) * _MAX_BLOCK + pos % _MAX_BLOCK


class CodebookSearch:
    """Nearest-centroid search against one codebook, with the codebook-side operands prepared once.

    score(x, c) = 2 (w * x) . c - w . c^2 is one matrix product [2 w*x, -w] @ [C, C^2]^T with inner
    dimension 2v (plain L2: 2 x @ C^T - |c|^2 as one addmm), then a row max: two passes over the
    (rows, k) score matrix, which is what bounds the time for large k.
    """

    def __init__(self, centroids: torch.Tensor):
        c = centroids.float()
        self.k = c.shape[0]
        self.ct = c.t().contiguous()  # (v, k)
        self.neg_norms = -(c * c).sum(1)  # (k,)
        self.cat_t = torch.cat([c, c * c], dim=1).t().contiguous()  # (2v, k)

    def index(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """Only the nearest index (the per-column hot loop of the fit): one product and one argmax."""
        if weights is None or weights.dim() == 1:
            return _row_max(torch.addmm(self.neg_norms, x, self.ct, alpha=2.0))[1]
        wx = weights * x
        return _row_max(torch.cat([2 * wx, -weights], dim=1) @ self.cat_t)[1]

    def topk(self, x: torch.Tensor, weights: torch.Tensor | None, m: int) -> torch.Tensor:
        """The m nearest indices (G, m), nearest first."""
        if weights is None or weights.dim() == 1:
            score = torch.addmm(self.neg_norms, x, self.ct, alpha=2.0)
        else:
            score = torch.cat([2 * weights * x, -weights], dim=1) @ self.cat_t
        return _row_topk(score, m)

    def __call__(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (n, v) float32; weights None, (n,) per vector (same argmin as plain L2) or (n, v) per element.
        Returns (index (n,) int64, weighted squared distance (n,) float32)."""
        if weights is not None and weights.dim() == 1:
            idx, dist = self(x, None)
            return idx, dist * weights
        rows = _chunk_rows(x.device, self.k)
        idx = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
        dist = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        for lo in range(0, x.shape[0], rows):
            xs = x[lo : lo + rows]
            if weights is None:
                score = torch.addmm(self.neg_norms, xs, self.ct, alpha=2.0)  # (rows, k)
                base = (xs * xs).sum(1)
            else:
                ws = weights[lo : lo + rows]
                wx = ws * xs
                score = torch.cat([2 * wx, -ws], dim=1) @ self.cat_t  # (rows, k)
                base = (wx * xs).sum(1)
            # Plain max here: with _row_max and a reused score buffer the real k-means steps were ~2x
            # SLOWER on the shared box (109 vs 40-65 s for 3 steps, NOTES.md), though microbenchmarks said faster.
            best, arg = score.max(dim=1)
            idx[lo : lo + rows] = arg
            dist[lo : lo + rows] = (base - best).clamp_min(0)
        return idx, dist


def nearest(
    x: torch.Tensor, centroids: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted nearest centroid of every row of x (see CodebookSearch); returns (index, distance)."""
    return CodebookSearch(centroids)(x, weights)


def _segment_sums(values: torch.Tensor, assign: torch.Tensor, k: int) -> torch.Tensor:
    """(n, d) values summed per cluster -> (k, d) float64, in a run-to-run deterministic order.

    The prefix sum runs along the innermost dimension of a (d, n) copy: CUDA scans a non-innermost
    dimension with one sequential thread per column (d = 8 threads over n = 10^6 rows), which made a
    shared k-means of the presets ~45 s per scope on an H100 (session 6 device log: 1M vectors 46 s,
    0.41M 16 s, i.e. linear in n; pytorch/pytorch#122170 measures that kernel at ~250 ms for 8 columns).
    On the CPU the additions happen in the same order either way (same bits)."""
    order = torch.argsort(assign, stable=True)
    counts = torch.bincount(assign, minlength=k)
    csum = values[order].double().t().contiguous().cumsum(1)  # (d, n)
    csum = torch.cat([csum.new_zeros(csum.shape[0], 1), csum], dim=1)
    ends = counts.cumsum(0)
    return (csum[:, ends] - csum[:, ends - counts]).t()


# k-means++ seeding costs k sequential passes over the samples; above this k random seeding is used
# (as in the published VPTQ, which calls cuML with init='random' for 65536 centroids).
_PP_MAX_K = 4096


def _kmeanspp_init(x: torch.Tensor, w: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """k-means++ seeding (D^2 sampling, weighted distances), driven by a CPU generator: deterministic."""
    n = x.shape[0]
    c = torch.empty(k, x.shape[1], device=x.device)
    first = int(torch.randint(0, n, (1,), generator=gen))
    c[0] = x[first]
    d2 = (w * (x - c[0]).pow(2)).sum(1)  # (n,) weighted distance to the nearest chosen centroid
    draws = torch.rand(k, generator=gen, dtype=torch.float64)
    for i in range(1, k):
        csum = d2.double().cumsum(0)
        target = (draws[i] * csum[-1]).to(x.device)
        j = int(torch.searchsorted(csum, target.reshape(1)).clamp_max(n - 1))
        c[i] = x[j]
        d2 = torch.minimum(d2, (w * (x - c[i]).pow(2)).sum(1))
    return c


def weighted_kmeans(
    x: torch.Tensor,
    k: int,
    weights: torch.Tensor | None = None,
    *,
    iters: int = 30,
    seed: int = 0,
    max_samples: int | None = None,
    tol: float = 1e-6,
) -> torch.Tensor:
    """Fit k centroids to x (n, v) minimising the weighted squared error (module docstring).

    weights: None, (n,) or (n, v), non-negative. Initialisation: k-means++ for k <= 4096, else k distinct
    samples, drawn with a CPU generator seeded by `seed`. Empty clusters are re-seeded with the points of
    largest weighted error. Stops after `iters` Lloyd steps or when the objective improves by less than
    `tol` (relative). Returns (k, v) float32 centroids on x's device.
    """
    if x.dim() != 2 or x.shape[0] == 0:
        raise CompressError(f"weighted_kmeans: expected a non-empty (n, v) tensor, got shape {tuple(x.shape)}")
    if weights is not None and weights.shape[0] != x.shape[0]:
        raise CompressError(f"weighted_kmeans: weights shape {tuple(weights.shape)} does not match x {tuple(x.shape)}")
    x = x.float()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    if max_samples is not None and x.shape[0] > max_samples:
        keep = torch.randperm(x.shape[0], generator=gen)[:max_samples].sort().values.to(x.device)
        x = x[keep]
        weights = None if weights is None else weights[keep]
    n = x.shape[0]
    search_w = None if weights is None else weights.float()  # (n,) keeps the cheap plain-L2 argmin
    w = torch.ones(n, 1, device=x.device) if weights is None else weights.float().reshape(n, -1)
    w = w.expand(n, x.shape[1])  # (n, v) per-element weights for the centroid update
    wx = w * x
    if k <= _PP_MAX_K and n > k:
        # Seeding on at most 16 samples per centroid: the seeds only need to cover the distribution.
        sub = torch.randperm(n, generator=gen)[: 16 * k].sort().values.to(x.device) if n > 16 * k else slice(None)
        # One thread on CPU: k sequential steps of small ops (65536 x 8 for k = 4096), where waiting for a
        # second thread costs more than it saves (58-225 s of 4096 steps with 2 threads on the shared
        # 2-core box). Every op here is elementwise or per row, so the bits do not depend on threads.
        with one_cpu_thread(x.device):
            c = _kmeanspp_init(x[sub], w[sub], k, gen)
    else:
        # Distinct data points (repeated only if n < k; those spares start dead and get re-seeded).
        pick = torch.randperm(n, generator=gen)[: min(n, k)]
        if n < k:
            pick = torch.cat([pick, torch.randint(0, n, (k - n,), generator=gen)])
        c = x[pick.to(x.device)].clone()
    prev = None
    for _ in range(iters):
        assign, dist = CodebookSearch(c)(x, search_w)
        obj = float(dist.double().sum())
        num = _segment_sums(wx, assign, k)  # (k, v)
        den = _segment_sums(w, assign, k)  # (k, v)
        alive = den > 0
        c = torch.where(alive, num / den.clamp_min(1e-300), c.double()).float()
        dead = (~alive).all(dim=1).nonzero().flatten()
        if dead.numel():
            # Re-seed dead centroids on the worst-served points: deterministic, and spends them where error is.
            worst = torch.topk(dist, min(dead.numel(), n)).indices
            c[dead[: worst.numel()]] = x[worst]
        if prev is not None and prev - obj <= tol * max(prev, 1e-30) and not dead.numel():
            break
        prev = obj
    return c
