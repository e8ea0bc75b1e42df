"""Calibration data: presets offline, local files, deterministic windows, clear errors."""
from __future__ import annotations

import json

import pytest
import torch

from calibration import build_calibration_set, load_documents
from compress.errors import CompressError


def test_c4_preset_resolves_offline_and_is_deterministic(stories_tokenizer):
    docs = load_documents("c4")
    assert docs.source.endswith("c4_sample_300.jsonl") and len(docs.docs) == 300
    a = build_calibration_set(docs, stories_tokenizer, 8, 64, seed=1, layout="stream")
    b = build_calibration_set(docs, stories_tokenizer, 8, 64, seed=1, layout="stream")
    c = build_calibration_set(docs, stories_tokenizer, 8, 64, seed=2, layout="stream")
    assert a.num_samples == 8 and a.tokens == 512 and not a.overlapping
    assert all(s["input_ids"].shape == (1, 64) for s in a.samples)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a.samples, b.samples))
    assert not all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a.samples, c.samples))


def test_default_layout_is_one_sample_per_document_with_bos_batched_by_equal_length(stories_tokenizer):
    docs = load_documents("c4")
    cal = build_calibration_set(docs, stories_tokenizer, 12, 256, seed=3, batch_size=4)
    assert cal.layout == "documents" and cal.record()["window_layout"] == "documents" and cal.num_samples == 12
    bos = stories_tokenizer.bos_token_id
    assert stories_tokenizer("a")["input_ids"][0] == bos  # this Llama tokenizer adds BOS, as oneshot's text path keeps
    prefixes = [[bos] + stories_tokenizer(text, add_special_tokens=False)["input_ids"] for text in docs.docs]
    lengths = [s["input_ids"].shape[-1] for s in cal.samples]
    assert lengths == sorted(lengths, reverse=True) and max(lengths) <= 256 and cal.tokens == sum(lengths)
    assert any(n < 256 for n in lengths)  # short documents stay short: no filling from other documents
    used = set()
    for s in cal.samples:  # each sample is BOS + the start of one distinct document, cut at seq_len only
        ids = s["input_ids"][0].tolist()
        hits = [i for i, p in enumerate(prefixes) if p[: len(ids)] == ids and (len(ids) == 256 or len(p) == len(ids)) and i not in used]
        assert hits
        used.add(hits[0])
    batches = list(cal.dataloader())
    # every token kept: a batch holds only samples of one length, at most 4 of them, in sample order
    assert torch.equal(torch.cat([b["input_ids"].flatten() for b in batches]), torch.cat([s["input_ids"].flatten() for s in cal.samples]))
    assert all(b["input_ids"].shape[0] <= 4 and bool(b["attention_mask"].all()) for b in batches)
    assert len(batches) == len([1 for i, n in enumerate(lengths) if i == 0 or n != lengths[i - 1]]) + sum(
        (lengths.count(n) - 1) // 4 for n in set(lengths))
    again = build_calibration_set(docs, stories_tokenizer, 12, 256, seed=3, batch_size=4)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(cal.samples, again.samples))
    other = build_calibration_set(docs, stories_tokenizer, 12, 256, seed=4, batch_size=4)
    assert not all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(cal.samples, other.samples))


def test_same_length_batches_group_runs_of_equal_length_up_to_the_batch_size():
    from calibration.sampling import same_length_batches

    assert same_length_batches([8, 8, 8, 8, 8, 5, 5, 3], 2) == [[0, 1], [2, 3], [4], [5, 6], [7]]
    assert same_length_batches([4, 4, 4], 16) == [[0, 1, 2]]
    assert same_length_batches([6, 5, 4], 16) == [[0], [1], [2]]
    assert same_length_batches([], 4) == []


def test_few_documents_give_further_chunks_round_by_round(tmp_path, stories_tokenizer):
    f = tmp_path / "two.txt"
    f.write_text("Once upon a time there was a little cat. " * 20 + "\n\n" + "The dog ran home. " * 3)
    cal = build_calibration_set(load_documents(str(f)), stories_tokenizer, 5, 32, seed=0, batch_size=1)
    long_doc = stories_tokenizer("Once upon a time there was a little cat. " * 20)["input_ids"]  # BOS first
    got = [s["input_ids"][0].tolist() for s in cal.samples]
    assert cal.num_samples == 5 and long_doc[:32] in got and long_doc[32:64] in got and long_doc[64:96] in got
    assert sum(row.count(stories_tokenizer.bos_token_id) for row in got) == 1  # a .txt file is one document: BOS once, none mid-text
    few = build_calibration_set(load_documents(str(f)), stories_tokenizer, 50, 32, seed=0)
    assert few.num_samples < 50 and "fewer than --num-samples 50" in few.notes[0]
    with pytest.raises(CompressError, match="unknown calibration window layout 'windows'"):
        build_calibration_set(load_documents(str(f)), stories_tokenizer, 5, 32, seed=0, layout="windows")


def test_dataloader_batches_windows_in_order_without_padding(stories_tokenizer):
    from calibration.sampling import auto_batch_size

    docs = load_documents("c4")
    cal = build_calibration_set(docs, stories_tokenizer, 10, 64, seed=1, batch_size=4, layout="stream")
    batches = list(cal.dataloader())
    assert [b["input_ids"].shape for b in batches] == [(4, 64), (4, 64), (2, 64)]
    assert torch.equal(torch.cat([b["input_ids"] for b in batches]), torch.cat([s["input_ids"] for s in cal.samples]))
    assert all(bool(b["attention_mask"].all()) for b in batches)
    assert cal.record()["batch_size"] == 4
    assert auto_batch_size(128, 512) == 16 and auto_batch_size(128, 2048) == 4 and auto_batch_size(3, 512) == 3
    assert auto_batch_size(8, 16384) == 1
    # default 1 (oneshot's bytes); "auto" sizes batches to ~8192 tokens; anything else is a one-line error
    assert build_calibration_set(docs, stories_tokenizer, 8, 64, seed=1).batch_size == 1
    assert build_calibration_set(docs, stories_tokenizer, 8, 64, seed=1, batch_size="auto").batch_size == 8
    assert build_calibration_set(docs, stories_tokenizer, 8, 64, seed=1, batch_size="3").batch_size == 3
    for bad in (0, -2, "0", "fast", "2.5"):
        with pytest.raises(CompressError, match=r"--batch-size .*positive integer .* or 'auto'"):
            build_calibration_set(docs, stories_tokenizer, 8, 64, seed=1, batch_size=bad)


def test_short_stream_draws_overlapping_windows_and_says_so(tmp_path, stories_tokenizer):
    f = tmp_path / "tiny.txt"
    f.write_text("Once upon a time there was a little cat. " * 20)
    cal = build_calibration_set(load_documents(str(f)), stories_tokenizer, 16, 32, seed=0, layout="stream")
    assert cal.overlapping and cal.num_samples == 16 and cal.notes


def test_wrong_text_column_names_the_columns(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("\n".join(json.dumps({"content": f"doc {i}"}) for i in range(3)))
    with pytest.raises(CompressError, match=r"no column 'text' or 'messages'; its columns are \['content'\].*--text-column"):
        load_documents(str(f))
    assert len(load_documents(str(f), text_column="content").docs) == 3


def test_chat_messages_are_rendered_with_the_chat_template(tmp_path, stories_tokenizer):
    f = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": "Tell a story."}, {"role": "assistant", "content": "Once upon a time a dog ran."}]}] * 4
    f.write_text("\n".join(json.dumps(r) for r in rows))
    docs = load_documents(str(f))
    assert docs.field == "messages"
    with pytest.raises(CompressError, match="no chat template"):
        build_calibration_set(docs, stories_tokenizer, 2, 8, seed=0)
    tok = stories_tokenizer.__class__.from_pretrained(stories_tokenizer.name_or_path)
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    cal = build_calibration_set(docs, tok, 2, 8, seed=0)
    assert cal.num_samples == 2


@pytest.mark.parametrize("spec, fragment", [("nosuchpreset", "unknown calibration dataset"), ("missing/file.txt", "does not exist"), ("x.csv", "unknown calibration dataset .x.csv.")])
def test_bad_dataset_specs(spec, fragment):
    with pytest.raises(CompressError, match=fragment):
        load_documents(spec)


def test_documents_calibration_is_bit_identical_to_oneshot_on_the_same_documents(stories_dir, stories_tokenizer):
    """One document per sample (the default layout) with one sample per pass gives llmcompressor exactly what
    its own text path builds from the same documents, in the same order: SmoothQuant + GPTQ write the same bytes."""
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM

    from calibration import calibration_documents
    from compress import compat
    from compress.recipe import load_recipe

    compat.quiet_third_party()
    docs = load_documents("c4")
    recipe = load_recipe("w8a8_smooth_gptq").llmcompressor_yaml()
    models = []
    for ours in (True, False):
        model = AutoModelForCausalLM.from_pretrained(stories_dir, dtype=torch.float32)
        if ours:
            data = dict(dataset=build_calibration_set(docs, stories_tokenizer, 6, 48, seed=5, batch_size=1).dataloader())
        else:
            same = calibration_documents(docs, stories_tokenizer, 6, seed=5)
            data = dict(dataset=Dataset.from_list([{"text": t} for t in same]), shuffle_calibration_samples=False)
        with compat.config_folder_for_oneshot(model):
            oneshot(model=model, recipe=recipe, processor=stories_tokenizer, num_calibration_samples=6, max_seq_length=48, **data)
        models.append(model.state_dict())
    assert models[0].keys() == models[1].keys()
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
