"""VPTQ session-5 options: the norm-matching row gain (rescale_rows gain="norm") and residual codebook sizes
per projection type (res_centroids_by_type), fitted, saved and read back."""

import pytest
import torch

from compress.vptq import VPTQConfig, VPTQModifierConfig, apply_vptq, fit_vptq

from tests.test_vptq_fit import _cfg, _layer
from tests.test_vptq_stage import CFG, _batches, _model, ids  # noqa: F401  (ids is a fixture)


def test_norm_gain_matches_each_row_energy_and_keeps_indices():
    w, h = _layer(n=32, k=64)
    w = w * torch.linspace(0.2, 3.0, 32)[:, None]
    ls = fit_vptq(w, h, _cfg(num_res_centroids=8))
    nm = fit_vptq(w, h, _cfg(num_res_centroids=8, row_gain="norm"))
    assert torch.equal(ls.indices, nm.indices) and torch.equal(ls.res_indices, nm.res_indices)

    def energy(m):
        return ((m @ h) * m).sum(1)

    ratio = energy(nm.dequantize(torch.float32)) / energy(w)
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=2e-3)  # fp16 scales: ~1e-3 relative
    shrink = energy(ls.dequantize(torch.float32)) / energy(w)
    assert float(shrink.mean()) < 0.995  # the least-squares rows are shrunk; the norm gain undoes it
    assert nm.extra["proxy_loss"] >= ls.extra["proxy_loss"] * (1 - 1e-3)  # not free: a little more loss


def test_res_centroids_by_type_config():
    cfg = VPTQConfig(num_centroids=256, num_res_centroids=16, scope="layer_type", res_centroids_by_type={"q_proj": 0, "up_proj": 64})
    assert cfg.res_centroids_for("self_attn.q_proj") == 0
    assert cfg.res_centroids_for("mlp.up_proj") == 64
    assert cfg.res_centroids_for("mlp.up_proj.v4") == 64  # the shrunk-vector scope of the same projection
    assert cfg.res_centroids_for("mlp.down_proj") == 16
    v = VPTQConfig(scope="layer_type", num_res_centroids=16, res_centroids_by_type={"v_proj": 32})
    assert v.res_centroids_for("self_attn.v_proj") == 32 and v.res_centroids_for("self_attn.v_proj.v4") == 32
    with pytest.raises(ValueError):
        VPTQConfig(scope="layer", res_centroids_by_type={"q_proj": 0})
    with pytest.raises(ValueError):
        VPTQConfig(scope="layer_type", res_centroids_by_type={"q_proj": 1})


def test_stage_moves_residual_bits_between_projection_types(ids, tmp_path):  # noqa: F811
    from compress.vptq import checkpoint as vptq_checkpoint

    cfg = VPTQModifierConfig(**CFG, scope="layer_type", res_centroids_by_type={"q_proj": 0, "down_proj": 64})
    model = _model()
    result = apply_vptq(model, _batches(ids), cfg, device="cpu")
    for name, vq in result.layers.items():
        if name.endswith("q_proj"):
            assert vq.res_codebook is None and vq.res_indices is None, name
        elif name.endswith("down_proj"):
            assert vq.res_codebook.shape[0] == 64 and vq.res_index_bits == 6, name
        else:
            assert vq.res_codebook.shape[0] == 16, name
        w = model.get_submodule(name).weight
        assert torch.equal(w, vq.dequantize(w.dtype)), name
    out = vptq_checkpoint.save(model, None, tmp_path / "ck", result, torch.float16, {"recipe": "test"})
    loaded = vptq_checkpoint.load(out)  # the existing reader takes mixed residual sizes per layer
    for name in result.layers:
        assert torch.equal(loaded.get_submodule(name).weight, model.get_submodule(name).weight), name


def test_unknown_projection_name_is_a_one_line_error(ids):  # noqa: F811
    from compress.errors import CompressError

    cfg = VPTQModifierConfig(**CFG, scope="layer_type", res_centroids_by_type={"up_prj": 64})
    with pytest.raises(CompressError, match="up_prj"):
        apply_vptq(_model(), _batches(ids, n=1), cfg, device="cpu")
