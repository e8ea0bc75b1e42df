"""Row-tiled order of the `compress.int4` qweight, for the W4A16 CUDA GEMV built with -DW4_TILED=1 (session 27,
an experiment: not written to checkpoints, not served by the runtime).

Why: the GEMV streams a 16-row tile of weights through each warp, one ring slot of SB 128-k blocks at a time. In the
plain layout (compress/packing/int4.py) a row's block is 64 bytes and the next row's is K / 2 bytes further on, so a
slot is 16 separate runs of SB x 64 bytes. Here a tile's block is 1 KB of contiguous memory and its blocks follow
each other, so a slot is one run of SB KB and a warp's whole K chunk one run.

Layout, for a plain qweight int32 (N, KW) with KW = 16 x kblocks (16 words = 64 bytes per row per 128-k block) and
N a multiple of 16:

    tiled[t, b, r, w] = plain[16 t + r, 16 b + w]      t < N / 16, b < kblocks, r < 16, w < 16

stored contiguously in that order and returned with the plain shape (N, KW), so every shape check of the plain
layout still holds. The words themselves (nibble order inside a block) are unchanged; scales and zeros are as before.
"""

from __future__ import annotations

import torch

from compress.errors import CompressError

TILE_ROWS = 16  # one mma row tile
BLOCK_WORDS = 16  # int32 words of one row's 128-k block


def _dims(qweight: torch.Tensor) -> tuple[int, int]:
    if qweight.dim() != 2 or qweight.dtype != torch.int32:
        raise CompressError(f"int4 tiling: qweight must be int32 (N, KW), got {qweight.dtype} {tuple(qweight.shape)}")
    n, kw = qweight.shape
    if n % TILE_ROWS or kw % BLOCK_WORDS:
        raise CompressError(f"int4 tiling: qweight shape {tuple(qweight.shape)} needs N a multiple of {TILE_ROWS} and "
                            f"KW a multiple of {BLOCK_WORDS}; serve this layer with the plain layout")
    return n, kw


def tile_rows(qweight: torch.Tensor) -> torch.Tensor:
    """The plain (N, KW) qweight in row-tiled order (same shape and dtype, a new tensor)."""
    n, kw = _dims(qweight)
    t = qweight.reshape(n // TILE_ROWS, TILE_ROWS, kw // BLOCK_WORDS, BLOCK_WORDS)
    return t.permute(0, 2, 1, 3).contiguous().reshape(n, kw)


def untile_rows(tiled: torch.Tensor) -> torch.Tensor:
    """The inverse of `tile_rows`."""
    n, kw = _dims(tiled)
    t = tiled.reshape(n // TILE_ROWS, kw // BLOCK_WORDS, TILE_ROWS, BLOCK_WORDS)
    return t.permute(0, 2, 1, 3).contiguous().reshape(n, kw)
