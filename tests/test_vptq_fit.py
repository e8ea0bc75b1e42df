"""VPTQ fitting: k-means, determinism, the value of the Hessian and of the residual, outliers, refinement."""

import pytest
import torch

from compress.errors import CompressError
from compress.vptq import VPTQConfig, fit_vptq
from compress.vptq.fit import proxy_loss
from compress.vptq.kmeans import nearest, weighted_kmeans


def _layer(n=32, k=64, tokens=1024, seed=0, spread=1.5):
    """A weight and the Hessian of anisotropic, correlated inputs (a few large channels, like LLM activations)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    scales = torch.exp(spread * torch.randn(k, generator=gen))
    mix = torch.eye(k) + 0.3 * torch.randn(k, k, generator=gen) / k**0.5
    x = torch.randn(tokens, k, generator=gen) @ mix * scales
    return w, x.t() @ x / tokens


def _cfg(**kw):
    return VPTQConfig(**{"vector_len": 4, "num_centroids": 64, "scope": "layer", "kmeans_iters": 20, **kw})


def test_toy_linear_8x6_reconstructs_and_packs():
    w, h = _layer(n=8, k=6)
    vq = fit_vptq(w, h, _cfg(num_centroids=16))
    assert vq.indices.shape == (6, 1) and vq.index_bits == 4  # 2 vectors of 4 per column, 8 bits < 1 word
    w_q = vq.dequantize(torch.float32)
    assert w_q.shape == (8, 6)
    assert vq.extra["proxy_loss"] == pytest.approx(proxy_loss(w, w_q, h), rel=1e-6)
    assert vq.extra["proxy_loss"] < 0.2


def test_kmeans_finds_separated_clusters():
    gen = torch.Generator().manual_seed(1)
    centers = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = centers.repeat_interleave(50, 0) + 0.1 * torch.randn(150, 2, generator=gen)
    c = weighted_kmeans(x, 3, iters=20, seed=0)
    got = sorted(tuple(round(float(v)) for v in row) for row in c)
    assert got == [(0, 0), (0, 10), (10, 0)]


def test_kmeans_weights_pull_centroids():
    x = torch.tensor([[0.0], [1.0]])
    c = weighted_kmeans(x, 1, torch.tensor([3.0, 1.0]), iters=3)
    assert float(c[0, 0]) == pytest.approx(0.25)


def test_weighted_nearest_uses_element_weights():
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    x = torch.tensor([[0.7, 0.6]])
    assert int(nearest(x, c)[0][0]) == 0
    assert int(nearest(x, c, torch.tensor([[0.1, 10.0]]))[0][0]) == 1  # the second element matters more


def test_same_seed_same_bytes_other_seed_differs():
    w, h = _layer()
    cfg = _cfg(num_res_centroids=8)
    a, b = fit_vptq(w, h, cfg), fit_vptq(w, h, cfg)
    for name in ("codebook", "indices", "res_codebook", "res_indices", "scale"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    c = fit_vptq(w, h, _cfg(num_res_centroids=8, seed=1))
    assert not torch.equal(a.codebook, c.codebook)


def test_hessian_beats_identity_on_calibration_loss():
    w, h = _layer()
    with_h = fit_vptq(w, h, _cfg())
    without = fit_vptq(w, torch.eye(h.shape[0]), _cfg())
    loss_h = proxy_loss(w, with_h.dequantize(torch.float32), h)
    loss_i = proxy_loss(w, without.dequantize(torch.float32), h)
    assert loss_h < 0.7 * loss_i, (loss_h, loss_i)


def test_residual_reduces_error():
    w, h = _layer()
    plain = fit_vptq(w, h, _cfg()).extra["proxy_loss"]
    resid = fit_vptq(w, h, _cfg(num_res_centroids=16)).extra["proxy_loss"]
    assert resid < 0.8 * plain, (plain, resid)


def test_outlier_columns_use_their_own_codebook():
    w, h = _layer()
    vq = fit_vptq(w, h, _cfg(outlier_cols=4, num_outlier_centroids=32))
    assert vq.outlier_cols.tolist() == sorted(vq.outlier_cols.tolist()) and len(vq.outlier_cols) == 4
    importance = h.diagonal() * w.pow(2).sum(0)
    assert set(vq.outlier_cols.tolist()) == set(torch.topk(importance, 4).indices.tolist())
    assert vq.extra["proxy_loss"] < fit_vptq(w, h, _cfg()).extra["proxy_loss"]


def test_refinement_lowers_the_objective():
    w, h = _layer()
    base = fit_vptq(w, h, _cfg(num_res_centroids=8)).extra["proxy_loss"]
    refined = fit_vptq(w, h, _cfg(num_res_centroids=8, refine_iters=10)).extra["proxy_loss"]
    assert refined < base


@pytest.mark.parametrize("norm", ["none", "scale", "scale_bias"])
def test_norm_modes_store_what_they_use(norm):
    w, h = _layer(n=16, k=16)
    vq = fit_vptq(w + 3.0, h, _cfg(norm=norm))
    assert (vq.scale is not None) == (norm != "none") and (vq.bias is not None) == (norm == "scale_bias")


def test_shared_codebook_is_used_as_given():
    w, h = _layer()
    book = torch.randn(64, 4).half()
    vq = fit_vptq(w, h, _cfg(), codebook=book, codebook_key="model")
    assert vq.codebook is book or torch.equal(vq.codebook, book)
    assert vq.codebook_name("codebook", "x.q_proj") == "vptq_shared.model.codebook"


def test_indivisible_layer_is_refused_with_the_fix():
    w, h = _layer(n=10, k=8)
    with pytest.raises(CompressError, match="out_features=10 is not divisible by vector_len=4.*indivisible"):
        fit_vptq(w, h, _cfg())


def test_dead_inputs_are_handled():
    w, h = _layer(n=8, k=8)
    h[3, :] = 0
    h[:, 3] = 0
    vq = fit_vptq(w, h, _cfg(num_centroids=16))
    assert torch.isfinite(vq.dequantize(torch.float32)).all()


def test_joint_fit_of_layers_sharing_an_input_equals_separate_fits():
    from compress.vptq.fit import fit_vptq_joint

    w, h = _layer(n=48)
    book, res = torch.randn(64, 4).half(), (0.3 * torch.randn(8, 4)).half()
    cfg = _cfg(num_res_centroids=8)
    parts = [w[:16], w[16:40], w[40:]]
    joint = fit_vptq_joint(parts, h, cfg, codebook=book, res_codebook=res, codebook_key="m", res_codebook_key="m")
    for part, vq in zip(parts, joint):
        alone = fit_vptq(part, h, cfg, codebook=book, res_codebook=res, codebook_key="m", res_codebook_key="m")
        assert torch.equal(vq.dequantize(torch.float32), alone.dequantize(torch.float32))
        assert vq.extra["proxy_loss"] == pytest.approx(alone.extra["proxy_loss"])


def test_residual_beam_never_picks_a_worse_pair_than_greedy():
    from compress.vptq.fit import Codebooks, _quantize_column

    gen = torch.Generator().manual_seed(3)
    books = Codebooks(torch.randn(32, 4, generator=gen), 0.3 * torch.randn(8, 4, generator=gen))
    w = torch.randn(64, generator=gen)
    s, t = torch.rand(64, generator=gen) + 0.5, torch.zeros(64)
    row_w = s.pow(2).reshape(16, 4)
    greedy, _, _ = _quantize_column(w, s, t, row_w, books, False, True, beam=1)
    beam, _, _ = _quantize_column(w, s, t, row_w, books, False, True, beam=8)
    err_g = (w - greedy).pow(2).reshape(16, 4).sum(1)
    err_b = (w - beam).pow(2).reshape(16, 4).sum(1)
    assert (err_b <= err_g + 1e-6).all() and err_b.sum() < err_g.sum()


def test_obs_column_weights_run_and_differ():
    w, h = _layer()
    a = fit_vptq(w, h, _cfg(kmeans_weight="obs"))
    b = fit_vptq(w, h, _cfg())
    assert not torch.equal(a.codebook, b.codebook) and a.extra["proxy_loss"] < 0.5


def test_row_rescale_keeps_indices_and_lowers_every_row_loss():
    w, h = _layer(n=32, k=64)
    w = w * torch.linspace(0.2, 3.0, 32)[:, None]  # rows of different magnitude, so scales matter
    off = fit_vptq(w, h, _cfg(num_res_centroids=8, rescale_rows=False))
    on = fit_vptq(w, h, _cfg(num_res_centroids=8, rescale_rows=True))
    assert torch.equal(off.indices, on.indices) and torch.equal(off.res_indices, on.res_indices)
    assert not torch.equal(off.scale, on.scale)

    def row_losses(vq):
        e = w - vq.dequantize(torch.float32)
        return ((e @ h) * e).sum(1)

    assert bool((row_losses(on) <= row_losses(off) * (1 + 1e-6)).all())
    assert on.extra["proxy_loss"] < 0.99 * off.extra["proxy_loss"]  # measured: -2.4%
