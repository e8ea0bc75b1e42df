"""Own codebooks for atypical layers (own_codebooks) and the diag(H) floor (hdiag_floor), on the real
stories260K Llama and on tensors: the chosen layers carry per-layer codebooks that round-trip through the
checkpoint, are the most distorted under their shared codebook, and are counted in the bits."""

import pytest
import torch
from pydantic import ValidationError

from compress.vptq import VPTQConfig, VPTQModifierConfig, apply_vptq
from compress.vptq import checkpoint as vptq_checkpoint
from compress.vptq.fit import fit_vptq, floor_hdiag

from tests.conftest import CORPORA, STORIES

CFG = dict(num_centroids=64, num_res_centroids=8, kmeans_iters=4, indivisible="shrink", scope="layer_type")


def _model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(STORIES), dtype=torch.float32).eval()


def _batches(stories_tokenizer, n=3, length=64):
    ids = stories_tokenizer((CORPORA / "tinystories_sample.txt").read_text()[:20000], return_tensors="pt").input_ids[0]
    return [{"input_ids": ids[i * length : (i + 1) * length][None]} for i in range(n)]


def test_own_codebooks_go_to_the_most_distorted_layers_and_round_trip(stories_tokenizer, tmp_path):
    batches = _batches(stories_tokenizer)
    base = apply_vptq(_model(), batches, VPTQModifierConfig(**CFG), device="cpu")
    model = _model()
    result = apply_vptq(model, batches, VPTQModifierConfig(**CFG, own_codebooks=2, own_codebook_ratio=1.0), device="cpu")
    own = sorted(n for n, s in result.stats.items() if s.get("own_codebook"))
    assert len(own) == 2
    ratios = {n: s["distortion_ratio"] for n, s in result.stats.items()}
    assert min(ratios[n] for n in own) >= max(r for n, r in ratios.items() if n not in own)
    for name, vq in result.layers.items():
        if name in own:  # per-layer tensors, sized as the scope's
            assert vq.codebook_key is None and vq.res_codebook_key is None
            assert vq.codebook.shape[0] == 64 and vq.res_codebook.shape[0] == 8
        else:
            assert vq.codebook_key is not None
        assert torch.equal(model.get_submodule(name).weight, vq.dequantize(torch.float32)), name
    size, size0 = result.size_report(), base.size_report()
    assert size["num_codebooks"] == size0["num_codebooks"] + 4  # main + residual per own layer
    assert size["bits_per_weight"] > size0["bits_per_weight"]
    out = vptq_checkpoint.save(model, None, tmp_path / "ck", result, torch.float16, {"recipe": "test"})
    back = vptq_checkpoint.read_layers(out)
    for name in own:
        assert torch.equal(back[name].dequantize(torch.float32), result.layers[name].dequantize(torch.float32))
    meta = vptq_checkpoint.read_quantization_config(out)["layers"][own[0]]
    assert meta["codebook"] == f"{own[0]}.vptq_codebook"


def test_own_codebooks_off_is_the_old_fit(stories_tokenizer):
    """Defaults (own_codebooks 0, hdiag_floor 0) leave the fit as it was: same codebooks and indices."""
    batches = _batches(stories_tokenizer, n=2)
    a = apply_vptq(_model(), batches, VPTQModifierConfig(**CFG), device="cpu")
    b = apply_vptq(_model(), batches, VPTQModifierConfig(**CFG, own_codebook_ratio=3.0, hdiag_floor=0.0), device="cpu")
    for name in a.layers:
        assert torch.equal(a.layers[name].indices, b.layers[name].indices)
        assert torch.equal(a.layers[name].codebook, b.layers[name].codebook)


def test_floor_hdiag_raises_quiet_channels_only():
    d = torch.tensor([0.0, 1e-4, 0.5, 1.0, 2.0, 100.0])
    f = floor_hdiag(d, 0.5)  # median of the live entries: 1.0
    assert torch.equal(f, torch.tensor([0.0, 0.5, 0.5, 1.0, 2.0, 100.0]))
    assert floor_hdiag(d, 0.0) is d


def test_hdiag_floor_bounds_the_error_of_a_quiet_channel():
    """A channel ~silent in calibration: without the floor the error feedback parks error in its weights;
    with it, that column's weights stay close to the float ones."""
    torch.manual_seed(0)
    w = torch.randn(64, 32)
    x = torch.randn(512, 32)
    x[:, 5] *= 1e-3  # quiet channel
    h = x.t() @ x / x.shape[0]
    cfg = VPTQConfig(vector_len=4, num_centroids=32, kmeans_iters=4, seed=0)
    err = []
    for floor in (0.0, 0.5):
        vq = fit_vptq(w, h, cfg.model_copy(update={"hdiag_floor": floor}))
        err.append(float((vq.dequantize(torch.float32)[:, 5] - w[:, 5]).pow(2).mean() / w[:, 5].pow(2).mean()))
    assert err[1] < 0.85 * err[0], err  # measured 0.295 -> 0.222


def test_own_codebooks_need_shared_scopes():
    with pytest.raises(ValidationError, match="own_codebooks needs shared codebooks"):
        VPTQConfig(scope="layer", own_codebooks=2)
