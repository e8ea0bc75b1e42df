"""Turn documents into a deterministic set of fixed-length token windows for calibration."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import torch

from compress.errors import CompressError

from .presets import CALIBRATION_PRESETS
from .sources import Documents, read_local_file, resolve_preset


@dataclass
class CalibrationSet:
    """Token windows (each `input_ids` of shape (1, seq_len)) and how they were drawn."""

    samples: list[dict[str, torch.Tensor]]
    seq_len: int
    seed: int
    source: str
    sha256: str
    documents: int
    stream_tokens: int
    overlapping: bool
    notes: list[str] = field(default_factory=list)

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    @property
    def tokens(self) -> int:
        return sum(s["input_ids"].shape[-1] for s in self.samples)

    batch_size: int = 1
    layout: str = "documents"

    def dataloader(self):
        """A DataLoader of (batch, length) batches in sample order (llmcompressor accepts it as is).

        A batch holds up to batch_size consecutive samples of the same length, so batches need neither
        padding (it would enter the Hessians and activation statistics as if it were text) nor truncation
        (llmcompressor's truncating collator drops every token past the batch's shortest sample). The
        documents layout sorts its samples by length, so equal lengths sit together; stream windows all
        have seq_len tokens."""
        from torch.utils.data import DataLoader

        rows = [{k: v[0] for k, v in s.items()} for s in self.samples]  # (length,) each
        return DataLoader(rows, batch_sampler=same_length_batches([len(r["input_ids"]) for r in rows], self.batch_size))

    def record(self) -> dict:
        return {
            "source": self.source,
            "sha256": self.sha256,
            "documents": self.documents,
            "num_samples": self.num_samples,
            "seq_len": self.seq_len,
            "tokens": self.tokens,
            "stream_tokens": self.stream_tokens,
            "overlapping_windows": self.overlapping,
            "batch_size": self.batch_size,
            "window_layout": self.layout,
            "seed": self.seed,
        }


def load_documents(spec: str, text_column: str | None = None) -> Documents:
    """`spec` is a calibration preset name or a path to a local .txt/.jsonl/.parquet file."""
    path = Path(spec).expanduser()
    if path.suffix and (path.exists() or "/" in spec or path.suffix in (".txt", ".jsonl", ".json", ".parquet")):
        if not path.is_file():
            raise CompressError(f"dataset file {spec} does not exist: pass an existing file or a preset ({', '.join(CALIBRATION_PRESETS)})")
        return read_local_file(path, text_column)
    preset = CALIBRATION_PRESETS.get(spec)
    if preset is None:
        raise CompressError(
            f"unknown calibration dataset '{spec}': use a preset ({', '.join(CALIBRATION_PRESETS)}) or a local .txt/.jsonl/.parquet file"
        )
    return resolve_preset(preset, text_column)


def _render(docs: Documents, tokenizer) -> list[str]:
    if docs.field == "text":
        return [d for d in docs.docs if isinstance(d, str) and d.strip()]
    if not getattr(tokenizer, "chat_template", None):
        raise CompressError(
            f"{docs.source} holds chat 'messages' but the model's tokenizer has no chat template: "
            "use a plain-text dataset or a tokenizer with a chat template"
        )
    return [tokenizer.apply_chat_template(m, tokenize=False) for m in docs.docs]


TOKENS_PER_BATCH = 8192  # auto batch size: windows per forward pass ~ this many tokens


def auto_batch_size(num_samples: int, seq_len: int) -> int:
    return max(1, min(num_samples, TOKENS_PER_BATCH // seq_len))


def parse_batch_size(value: int | str | None, name: str = "--batch-size", cli: bool = True) -> int | str:
    """--batch-size / calibration.batch_size: None -> 1 (the default), "auto", or a positive integer; anything
    else is an error naming `name`, the value and the fix. cli: command-line text (the keyword in any case, numbers
    as digit strings); otherwise a recipe value (the keyword exactly; numbers are YAML integers).

    Why 1 is the default: llmcompressor's `oneshot` runs one sample per forward pass, and GPTQ's rounding
    follows float summation order, so any other batching gives another (not a better or worse) checkpoint;
    with 1, a run writes exactly oneshot's bytes from the same documents. "auto" (about 8192 tokens per pass)
    is the fast choice: same math, other rounding (measured on an H100: AWQ up to 9x faster)."""
    if value is None:
        return 1
    if isinstance(value, str):
        text = value.strip().lower() if cli else value
        if text == "auto":
            return "auto"
        n = int(text) if cli and text.isdigit() else 0
    else:
        n = value if isinstance(value, int) and not isinstance(value, bool) else 0
    if n < 1:
        raise CompressError(f"{name} {value!r}: give a positive integer (1 reproduces oneshot) or 'auto'")
    return n


WINDOW_LAYOUTS = ("documents", "stream")


def same_length_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices of consecutive samples grouped into batches of at most batch_size samples of equal length."""
    batches: list[list[int]] = []
    for i, n in enumerate(lengths):
        if batches and len(batches[-1]) < batch_size and lengths[batches[-1][0]] == n:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _stream_windows(tokenized: list[list[int]], separator: list[int], num_samples: int, seq_len: int, seed: int):
    """Join the documents into one stream (separator between them) and cut consecutive windows; when the
    stream is too short, windows at seeded random offsets (they may overlap)."""
    stream: list[int] = []
    for ids in tokenized:
        stream.extend(ids)
        stream.extend(separator)
    if len(stream) >= num_samples * seq_len:
        return stream, [i * seq_len for i in range(num_samples)], False
    gen = random.Random(seed + 1)
    return stream, sorted(gen.randrange(0, len(stream) - seq_len + 1) for _ in range(num_samples)), True


def _document_samples(tokenized: list[list[int]], num_samples: int, seq_len: int, prefix: list[int]) -> list[list[int]]:
    """One sample per document: `prefix` (the tokenizer's BOS, when it adds one) and the document's first
    tokens, seq_len in all, as llmcompressor's own text path tokenizes each document. Only when there are
    fewer documents than num_samples do documents give further samples, their next seq_len tokens (no
    BOS: they continue the text), round by round (a single long .txt file is then cut into consecutive
    chunks).

    Every token is kept: samples are sorted by length (longest first) and batched only with samples of
    the same length (`same_length_batches`), so a batch needs neither padding nor truncation. The
    samples, their order and their per-sample weighting are those of `oneshot` given the same documents;
    batching equal lengths changes only the float summation order (which GPTQ's rounding can feel:
    --batch-size 1 reproduces oneshot bit for bit).

    Why one document per sample is the default: on SmolLM2-135M, w4a16_gptq, five seeds on an H100,
    one-document samples gave WikiText-2 PPL 28.34 +- 0.18 against 28.93 +- 0.26 for windows cut from the
    joined documents (and 28.46 +- 0.38 for llmcompressor's oneshot), measured when batches were still cut
    to their shortest sample (11% of the tokens dropped): bench/results/h100/recipes/session3/README.md."""
    prefix = prefix[: seq_len - 1]
    starts = [ids if ids[: len(prefix)] == prefix else prefix + ids for ids in tokenized]  # no doubled BOS
    rows: list[list[int]] = []
    chunk = 0
    while len(rows) < num_samples:
        # chunk 0 holds the prefix; later chunks continue the document's own tokens (no BOS mid-text)
        pieces = [ids[chunk * seq_len : (chunk + 1) * seq_len] for ids in starts]
        pieces = [p for p in pieces if p]
        if not pieces:
            break
        rows.extend(pieces[: num_samples - len(rows)])
        chunk += 1
    # Longest first, ties in the order torch's sort gives them: llmcompressor's LengthAwareSampler orders
    # the same documents by the same call, so with --batch-size 1 the forward passes are oneshot's, in
    # oneshot's order (tests/test_calibration.py checks the bytes).
    order = torch.argsort(torch.tensor([len(r) for r in rows]), descending=True).tolist()
    return [rows[i] for i in order]


def _bos_prefix(tokenizer) -> list[int]:
    """The special tokens the tokenizer puts in front of a text by default (Llama-3: BOS; SmolLM2: none),
    found by tokenizing a probe both ways rather than trusting per-tokenizer flags."""
    probe = "a"
    with_special = tokenizer(probe)["input_ids"]
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    if plain and with_special[-len(plain):] == plain:
        return list(with_special[: len(with_special) - len(plain)])
    return []


def _seeded_order(n: int, seed: int) -> list[int]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


def calibration_documents(docs: Documents, tokenizer, num_samples: int, seed: int) -> list[str]:
    """The texts (chat messages rendered) that the documents layout draws its first-round samples from, in
    seeded order: the first num_samples documents of the shuffle. Lets another tool be handed exactly the
    documents `compress run` calibrates on (bench/recipes_vs_oneshot.py gives them to `oneshot`)."""
    texts = _render(docs, tokenizer)
    return [texts[i] for i in _seeded_order(len(texts), seed)[:num_samples]]


def build_calibration_set(
    docs: Documents, tokenizer, num_samples: int, seq_len: int, seed: int, batch_size: int | str | None = None,
    layout: str = "documents",
) -> CalibrationSet:
    """Shuffle documents by `seed`, then `num_samples` samples of at most `seq_len` tokens. `layout`
    "documents" (default): one sample per document (`_document_samples`); "stream": consecutive windows
    of exactly seq_len tokens cut from the documents joined by "\n\n" (random offsets, recorded as
    overlapping, when they are too short)."""
    if num_samples < 1:
        raise CompressError(f"--num-samples must be at least 1, got {num_samples}")
    if seq_len < 2:
        raise CompressError(f"--seq-len must be at least 2, got {seq_len}")
    batch_size = parse_batch_size(batch_size)
    if layout not in WINDOW_LAYOUTS:
        raise CompressError(f"unknown calibration window layout '{layout}': use one of {', '.join(WINDOW_LAYOUTS)}")
    texts = _render(docs, tokenizer)
    if not texts:
        raise CompressError(f"{docs.source} yields no non-empty text: check the file or --text-column")
    order = _seeded_order(len(texts), seed)
    # Documents are separated by a blank line, not by EOS: some tokenizers' EOS is a chat-control
    # token (SmolLM2's GGUF maps it to <|im_start|>), which would put unusual activations mid-text.
    separator = tokenizer("\n\n", add_special_tokens=False)["input_ids"]
    tokenized = [tokenizer(texts[i], add_special_tokens=False)["input_ids"] for i in order]
    total = sum(len(t) + len(separator) for t in tokenized)
    if layout == "stream" and total < seq_len:
        raise CompressError(
            f"{docs.source} has only {total} tokens, fewer than --seq-len {seq_len}: "
            "lower --seq-len or use a larger dataset"
        )
    notes = []
    batch_size = auto_batch_size(num_samples, seq_len) if batch_size == "auto" else batch_size
    if layout == "documents":
        rows = _document_samples(tokenized, num_samples, seq_len, _bos_prefix(tokenizer))
        if len(rows) < num_samples:
            notes.append(f"{docs.source} yields only {len(rows)} samples of at most {seq_len} tokens, fewer than --num-samples {num_samples}: all used")
        samples = [
            {"input_ids": torch.tensor(r, dtype=torch.long).unsqueeze(0), "attention_mask": torch.ones(1, len(r), dtype=torch.long)}
            for r in rows
        ]
        return CalibrationSet(samples, seq_len, seed, docs.source, docs.sha256, len(texts), total, False, notes, batch_size, layout)
    stream, starts, overlapping = _stream_windows(tokenized, separator, num_samples, seq_len, seed)
    if overlapping:
        notes.append(
            f"{docs.source} has {len(stream)} tokens, fewer than {num_samples} x {seq_len}: "
            "windows drawn at random offsets and may overlap"
        )
    ids = torch.tensor(stream, dtype=torch.long)
    samples = [
        {
            "input_ids": ids[s : s + seq_len].unsqueeze(0),  # (1, seq_len)
            "attention_mask": torch.ones(1, seq_len, dtype=torch.long),
        }
        for s in starts
    ]
    return CalibrationSet(
        samples, seq_len, seed, docs.source, docs.sha256, len(texts), total, overlapping, notes,
        batch_size, layout,
    )
