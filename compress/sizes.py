"""Sizes in bytes: the original as a 16-bit checkpoint, and what a checkpoint folder stores."""
from __future__ import annotations

from pathlib import Path

from compress.checkpoint import PACK_FILES


def model_size_16bit(model) -> int:
    """Parameters (tied ones once) at 2 bytes each: what the original occupies in fp16/bf16."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * 2
    return total


def checkpoint_bytes(folder: Path) -> int:
    """Bytes of the weight files a serving stack loads (extra kernel packings are not counted)."""
    return sum(f.stat().st_size for f in Path(folder).glob("*.safetensors") if f.name not in PACK_FILES)
