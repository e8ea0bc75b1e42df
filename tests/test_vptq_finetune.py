"""End-to-end codebook/scale refinement (compress/vptq/finetune.py): the deterministic gather gradient
equals autograd's, and on the real stories260K Llama the refinement lowers the held-out KL, keeps the
indices, and leaves the model carrying the exact reconstruction of what is stored."""

import pytest
import torch

from compress.vptq import VPTQModifierConfig, apply_vptq
from compress.vptq.finetune import _Index

from tests.conftest import CORPORA, STORIES


def test_gather_gradient_matches_autograd_index():
    gen = torch.Generator().manual_seed(0)
    book = torch.randn(37, 4, generator=gen, requires_grad=True)
    idx = torch.randint(0, 37, (500,), generator=gen)
    upstream = torch.randn(500, 4, generator=gen)
    (book[idx] * upstream).sum().backward()
    want = book.grad.clone()
    book.grad = None
    out = _Index.of(idx, 37).gather(book)
    (out * upstream).sum().backward()
    assert torch.equal(out, book.detach()[idx])
    assert torch.allclose(book.grad, want, atol=1e-5)


@pytest.fixture(scope="module")
def ids(stories_tokenizer):
    text = (CORPORA / "tinystories_sample.txt").read_text()[:60000]
    return stories_tokenizer(text, return_tensors="pt").input_ids[0]


def test_finetune_lowers_heldout_kl_and_keeps_indices(ids):
    from transformers import AutoModelForCausalLM

    batches = [
        {"input_ids": ids[i * 96 : (i + 1) * 96][None], "attention_mask": torch.ones(1, 96, dtype=torch.long)} for i in range(8)
    ]
    cfg = dict(num_centroids=256, num_res_centroids=16, kmeans_iters=6, indivisible="shrink", equalize=1.0)
    runs = {}
    for steps in (0, 12):
        model = AutoModelForCausalLM.from_pretrained(str(STORIES), dtype=torch.float32).eval()
        result = apply_vptq(model, batches, VPTQModifierConfig(**cfg, finetune_steps=steps, finetune_batch=2, finetune_lr=3e-3), device="cpu")
        runs[steps] = (model, result)
    model, tuned = runs[12]
    plain = runs[0][1]
    report = tuned.finetune
    assert report["heldout_windows"] == 1 and report["train_windows"] == 7
    assert report["heldout_kl_best"] < 0.97 * report["heldout_kl_start"], report["history"]
    for name, vq in tuned.layers.items():
        assert torch.equal(vq.indices, plain.layers[name].indices), name  # same assignment, new centroids/scales
        w = model.get_submodule(name).weight
        assert torch.equal(w, vq.dequantize(w.dtype)), name
    shared = {vq.codebook_key for vq in tuned.layers.values()}
    for key in shared:  # a shared codebook stays one tensor's worth of values across its layers
        books = [vq.codebook for vq in tuned.layers.values() if vq.codebook_key == key]
        assert all(torch.equal(b, books[0]) for b in books)


def test_finetune_norms_learn_and_land_in_the_model_and_checkpoint(ids, tmp_path):
    from transformers import AutoModelForCausalLM

    from compress.vptq import checkpoint as vptq_checkpoint
    from compress.vptq.finetune import _norm_parameters

    batches = [
        {"input_ids": ids[i * 96 : (i + 1) * 96][None], "attention_mask": torch.ones(1, 96, dtype=torch.long)} for i in range(8)
    ]
    cfg = dict(num_centroids=256, num_res_centroids=16, kmeans_iters=6, indivisible="shrink", equalize=1.0)
    kls = {}
    for norms in (False, True):
        model = AutoModelForCausalLM.from_pretrained(str(STORIES), dtype=torch.float32).eval()
        before = {n: p.detach().clone() for n, p in _norm_parameters(model).items()}
        result = apply_vptq(
            model, batches, VPTQModifierConfig(**cfg, finetune_steps=12, finetune_batch=2, finetune_lr=3e-3, finetune_norms=norms),
            device="cpu",
        )
        kls[norms] = result.finetune["heldout_kl_best"]
        assert result.finetune["norm_parameters"] == (11 if norms else 0)  # 5 blocks x 2 RMSNorms + the final one
        after = _norm_parameters(model)
        if norms:
            assert result.finetune["best_step"] > 0
            # the norms moved (equalisation also rescales some of them: compare with a run that only equalised)
            assert any(not torch.equal(after[n], plain_after[n]) for n in after)
        else:
            plain_after = {n: p.detach().clone() for n, p in after.items()}
            assert any(not torch.equal(after[n], before[n]) for n in after)  # equalisation folded into them
    assert kls[True] < kls[False], kls
    out = vptq_checkpoint.save(model, None, tmp_path / "ckpt", result, torch.float32, {"recipe": "test"})
    loaded = _norm_parameters(vptq_checkpoint.load(out))
    assert set(loaded) == set(after)
    for n, p in after.items():  # the learned norms are what the checkpoint holds
        assert torch.equal(loaded[n], p), n
