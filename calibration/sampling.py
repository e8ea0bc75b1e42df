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
        return self.num_samples * self.seq_len

    batch_size: int = 1

    def dataloader(self):
        """A DataLoader of (batch_size, seq_len) batches in sample order (llmcompressor accepts it as is).

        Every window has the same length, so batches need no padding: the calibration forward passes
        run batch_size windows at once (llmcompressor's own text path runs one document at a time,
        since its documents differ in length)."""
        from torch.utils.data import DataLoader

        rows = [{k: v[0] for k, v in s.items()} for s in self.samples]  # (seq_len,) each
        return DataLoader(rows, batch_size=self.batch_size, shuffle=False)

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


def build_calibration_set(
    docs: Documents, tokenizer, num_samples: int, seq_len: int, seed: int, batch_size: int | None = None
) -> CalibrationSet:
    """Shuffle documents by `seed`, join them into one token stream ("\n\n" between documents) and cut
    `num_samples` windows of `seq_len` tokens: consecutive when the stream is long enough, else at
    seeded random offsets (recorded as overlapping)."""
    if num_samples < 1:
        raise CompressError(f"--num-samples must be at least 1, got {num_samples}")
    if seq_len < 2:
        raise CompressError(f"--seq-len must be at least 2, got {seq_len}")
    if batch_size is not None and batch_size < 1:
        raise CompressError(f"--batch-size must be at least 1, got {batch_size}: give a positive number, or leave it out for the automatic size")
    texts = _render(docs, tokenizer)
    if not texts:
        raise CompressError(f"{docs.source} yields no non-empty text: check the file or --text-column")
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    # Documents are separated by a blank line, not by EOS: some tokenizers' EOS is a chat-control
    # token (SmolLM2's GGUF maps it to <|im_start|>), which would put unusual activations mid-text.
    separator = tokenizer("\n\n", add_special_tokens=False)["input_ids"]
    stream: list[int] = []
    for i in order:
        stream.extend(tokenizer(texts[i], add_special_tokens=False)["input_ids"])
        stream.extend(separator)
    if len(stream) < seq_len:
        raise CompressError(
            f"{docs.source} has only {len(stream)} tokens, fewer than --seq-len {seq_len}: "
            "lower --seq-len or use a larger dataset"
        )
    ids = torch.tensor(stream, dtype=torch.long)
    notes = []
    if len(stream) >= num_samples * seq_len:
        starts = [i * seq_len for i in range(num_samples)]
        overlapping = False
    else:
        gen = random.Random(seed + 1)
        starts = sorted(gen.randrange(0, len(stream) - seq_len + 1) for _ in range(num_samples))
        overlapping = True
        notes.append(
            f"{docs.source} has {len(stream)} tokens, fewer than {num_samples} x {seq_len}: "
            "windows drawn at random offsets and may overlap"
        )
    samples = [
        {
            "input_ids": ids[s : s + seq_len].unsqueeze(0),  # (1, seq_len)
            "attention_mask": torch.ones(1, seq_len, dtype=torch.long),
        }
        for s in starts
    ]
    return CalibrationSet(
        samples, seq_len, seed, docs.source, docs.sha256, len(texts), len(stream), overlapping, notes,
        batch_size or auto_batch_size(num_samples, seq_len),
    )
