"""compress.sparse24 metadata in a sparse mma's register order, for the CUDA GEMVs on the sparse tensor cores
(kernels/i8_gemv.py: mma.sp m16n8k64 .s8; kernels/sp24_w16_gemv.py: m16n8k32 .f16/.bf16).

Each GEMV loads, per 16-row tile and 128-k block, 32 lanes x R metadata registers of 8 nibbles (one nibble = the two
2-bit positions of a group of 4: low bits the first kept value's, high bits the second's). Which (tile row, block group)
each nibble describes is the GEMV's own layout, given here as two (32, R, 8) index tensors `rows` and `groups`; this
module only moves the nibbles. The same bytes as the row-major meta, reordered; rows past N get positions (0, 1)
(a valid pattern: mma.sp::ordered_metadata needs two distinct ascending positions; their outputs are never stored).
"""

from __future__ import annotations

import torch

from compress.errors import CompressError

BLOCK_K = 128  # k per block: 32 groups of 4


def as_int32(words: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2^32) -> int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack(meta: torch.Tensor, n: int, k: int, rows: torch.Tensor, groups: torch.Tensor, what: str) -> torch.Tensor:
    """compress.sparse24 meta (N, K/32) int32 -> (ceil(N / 16), K / 128, 32, R) int32 registers."""
    if k % BLOCK_K:
        raise CompressError(f"{what}: in_features={k} is not a multiple of {BLOCK_K}")
    if meta.dtype != torch.int32 or tuple(meta.shape) != (n, k // 32):
        raise CompressError(f"{what}: meta {tuple(meta.shape)} {meta.dtype} does not fit ({n}, {k}); "
                            f"expected int32 ({n}, {k // 32}) from compress.packing.sparse24")
    r16, kb = -(-n // 16), k // BLOCK_K
    shifts = 4 * torch.arange(8, device=meta.device, dtype=torch.int64)
    nib = ((meta.to(torch.int64).unsqueeze(-1) >> shifts) & 0xF).reshape(n, k // 4)  # a nibble per group of 4
    if r16 * 16 != n:
        nib = torch.cat([nib, torch.full((r16 * 16 - n, k // 4), 0b0100, dtype=nib.dtype, device=nib.device)])
    nib = nib.reshape(r16, 16, kb, 32).permute(0, 2, 1, 3)  # (R16, kb, 16 rows, 32 block groups)
    sel = nib[:, :, rows.to(meta.device), groups.to(meta.device)]  # (R16, kb, 32, R, 8)
    return as_int32((sel << shifts).sum(dim=-1)).contiguous()


def unpack(frag: torch.Tensor, n: int, k: int, rows: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack` (for tests): back to compress.sparse24 meta (N, K/32) int32."""
    r16, kb = frag.shape[0], frag.shape[1]
    shifts = 4 * torch.arange(8, device=frag.device, dtype=torch.int64)
    sel = (frag.to(torch.int64).unsqueeze(-1) & 0xFFFFFFFF) >> shifts & 0xF  # (R16, kb, 32, R, 8)
    nib = torch.zeros(r16, kb, 16, 32, dtype=torch.int64, device=frag.device)
    nib[:, :, rows.to(frag.device), groups.to(frag.device)] = sel
    nib = nib.permute(0, 2, 1, 3).reshape(r16 * 16, k // 4)[:n].reshape(n, k // 32, 8)
    return as_int32((nib << shifts).sum(dim=-1))


def decode_one_hot_probe(got: list[int], cells: int, rows: int = 16) -> list[tuple[int, int] | None]:
    """The A-layout half of the GEMVs' fragment probes: probe warp w set one kept value (cell w) to 1 with every
    metadata nibble 0b0100 (positions 0 and 1) and B[k] = k + 1, so D holds (dense k + 1) in the one row that holds
    the value. got[w * rows + m] = D[m][0] -> per cell (row, kept column) or None when not exactly one row answered
    or k is not at position 0 or 1 of its group: kept column c sits at dense k = 4 (c / 2) + c % 2."""
    out = []
    for w in range(cells):
        hits = [(m, got[w * rows + m]) for m in range(rows) if got[w * rows + m] != 0]
        if len(hits) != 1:
            out.append(None)
            continue
        m, v = hits[0]
        kk = v - 1
        out.append((m, 2 * (kk // 4) + kk % 4) if kk % 4 < 2 else None)
    return out
