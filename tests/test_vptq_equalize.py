"""Input-column equalisation (compress/vptq/equalize.py): the model's function is unchanged (to rounding),
the columns it targets come out with a smaller magnitude spread, and only targeted layers are touched."""

import torch

from compress.vptq.equalize import equalize_model
from compress.vptq.stage import decoder_blocks, target_linears

from tests.conftest import STORIES


def _model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(STORIES), dtype=torch.float32).eval()


def _spread(w: torch.Tensor) -> float:
    return float(torch.log2(w.detach().pow(2).mean(0).sqrt()).std())


def _exaggerate(model) -> None:
    """Give every block's inputs a wide magnitude spread (as real LLM columns have) without changing the
    function: the same power-of-two trick in reverse, on the producers and consumers."""
    gen = torch.Generator().manual_seed(0)
    for block in model.model.layers:
        a, m = block.self_attn, block.mlp
        c = torch.exp2(torch.randint(-3, 4, (a.q_proj.in_features,), generator=gen).float())
        block.input_layernorm.weight.data /= c
        for lin in (a.q_proj, a.k_proj, a.v_proj):
            lin.weight.data *= c
        d = torch.exp2(torch.randint(-3, 4, (m.down_proj.in_features,), generator=gen).float())
        m.up_proj.weight.data /= d[:, None]
        m.down_proj.weight.data *= d


def test_equalize_keeps_logits_bit_identical_and_narrows_column_spread():
    model = _model()
    _exaggerate(model)
    ids = torch.randint(0, 500, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(ids).logits
    linears = target_linears(model, ["Linear"], ["lm_head"])
    _, blocks = decoder_blocks(model, linears)
    q0, d0 = _spread(model.model.layers[0].self_attn.q_proj.weight), _spread(model.model.layers[0].mlp.down_proj.weight)
    folds = equalize_model(blocks, linears, 1.0)
    assert folds["0"] == ["o<-v", "down<-up", "qkv<-input_layernorm", "gate/up<-post_attention_layernorm"]
    with torch.no_grad():
        after = model(ids).logits
    assert torch.allclose(before, after, rtol=1e-5, atol=1e-5)  # same function up to float rounding
    assert _spread(model.model.layers[0].self_attn.q_proj.weight) < 0.5 * q0
    assert _spread(model.model.layers[0].mlp.down_proj.weight) < 0.5 * d0


def test_equalize_leaves_untargeted_layers_alone():
    model = _model()
    linears = target_linears(model, ["Linear"], ["lm_head", "re:.*self_attn.*"])  # MLPs only
    _, blocks = decoder_blocks(model, linears)
    norm = model.model.layers[0].input_layernorm.weight.clone()
    v = model.model.layers[0].self_attn.v_proj.weight.clone()
    folds = equalize_model(blocks, linears, 1.0)
    assert folds["0"] == ["down<-up", "gate/up<-post_attention_layernorm"]
    assert torch.equal(model.model.layers[0].input_layernorm.weight, norm)
    assert torch.equal(model.model.layers[0].self_attn.v_proj.weight, v)
