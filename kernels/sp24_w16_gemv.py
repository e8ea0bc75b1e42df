"""CUDA C++ GEMV for weight-only int8 on 2:4 weights (W8A16 2:4) at 1..8 tokens, on the sparse tensor cores
(kernels/csrc/sp24_w16_gemv.cu, session 24). Built with nvcc on first use (kernels/cuda_build.py), loaded through
ctypes, launched on torch's current stream with programmatic dependent launch.

Math: kernels.sparse24.sparse24_w8a16_linear_ref: y = (x @ W_int^T) * s_w, the int8 values widened exactly to x's
dtype, fp32 sums (the tensor core's; their order differs from the reference's, so results agree to rounding).

Why: the Triton W8A16 2:4 GEMV (kernels/sparse24.py) spends ~28.5 instructions on each value word of 4 values
(gather, convert, multiply one by one) and streams at 1.7-2.2 TB/s, where the W8A8 2:4 GEMV streams the same bytes at
2.4-2.8 TB/s; mma.sp reads the 2-bit positions itself, so here a value word costs ~5 instructions.

Layouts:
- values: the compress.sparse24 int8 values (N, K / 2) as they are; K a multiple of 128.
- metadata: repacked once at load (`pack_meta_fragments`) into the mma's metadata registers in register order:
  (ceil(N / 16), K / 128, 32 lanes, 2) int32 -- for each 16-row tile and 128-k chunk, each lane's two registers (the
  chunk's k-steps 2 (t / 2) and 2 (t / 2) + 1 for lane 4 g + t). The same bytes as the row-major meta, reordered.

Public: `sparse24_w8a16_gemv` (custom op compress::sp24_w16_gemv), `supports`, `runtime_offers`, `pack_meta_fragments`,
`unpack_meta_fragments`, `meta_layout`, `chunk_group`, `probe_layout` (the GPU measurement behind `meta_layout`),
`build`, `plan`, `launch`, `VARIANTS`, `RUNTIME_VARIANTS`. COMPRESS_SP24_W16=0 turns the kernel off (the runtime then offers its other paths).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, sp24_registers
from kernels.op_dispatch import direct_call, on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "sp24_w16_gemv.cu"
MAX_M = 8  # one mma n-tile of tokens
CHUNK_K = 128  # k per chunk: 64 value bytes of a row, four mma k-steps of 32
# Build variants: name -> (warps per CTA, warps per 16-row tile, chunks of weights in flight per warp). A CTA owns
# 16 x warps / (warps per tile) rows; the warps of a tile split its chunks (the .cu header).
VARIANTS = {"w8d2": (8, 1, 2), "w8d3": (8, 1, 3), "w8d4": (8, 1, 4), "w8k8d2": (8, 8, 2), "w8k4d2": (8, 4, 2),
            "w4k4d2": (4, 4, 2)}
DEFAULT_VARIANT = "w8k4d2"
# The builds the runtime offers (one path each; its PathTable times them against the Triton GEMV per layer and M).
# Session 24, call 6 (H100, rotate timing, us; bench/results/h100/kernels_s24/README.md): at one token the builds
# whose warps share a tile stream the large layers far faster (70B gate/up 68.8 with one warp a tile -> 54.4 with 4,
# 55.1 with 8; 8B gate/up 17.3 -> 14.7); at 8 tokens, where every CTA stages 8 tokens of x, one warp a tile wins
# (8B down 21.3 with w8d4 against 30.9 with w8k4d2).
RUNTIME_VARIANTS = ("w8k4d2", "w8k8d2", "w8d2", "w8d4")
# waves = CTAs launched / CTAs resident at once (`plan`); 1 keeps every CTA resident from the start.
DEFAULT_WAVES = 1.0
STAGED_BYTES = 64 * 1024  # staged activations per CTA at most (256 bytes per chunk and token)
PDL_DEFAULT = 2  # 0 plain launches, 1 programmatic dependent launch, 2 the same with the first weights read before the wait

_RC = {-1: "M outside 1..8", -3: "bad split-K plan", -4: "shared memory over the device's per-block limit",
       -5: "K not a multiple of 128, or x rows not 16-byte aligned"}


def enabled() -> bool:
    return os.environ.get("COMPRESS_SP24_W16", "1") != "0"


def runtime_variants() -> tuple[str, ...]:
    """The builds the runtime offers: COMPRESS_SP24_W16_VARIANTS (comma list of `VARIANTS` names) or RUNTIME_VARIANTS."""
    v = os.environ.get("COMPRESS_SP24_W16_VARIANTS")
    if not v:
        return RUNTIME_VARIANTS
    names = tuple(n.strip() for n in v.split(",") if n.strip())
    bad = [n for n in names if n not in VARIANTS]
    if bad or not names:
        raise CompressError(f"COMPRESS_SP24_W16_VARIANTS={v!r} names no build or unknown ones {bad}; pick from "
                            f"{sorted(VARIANTS)} or unset it")
    return names


def pdl_mode() -> int:
    v = os.environ.get("COMPRESS_SP24_W16_PDL", str(PDL_DEFAULT))
    if v not in ("0", "1", "2"):
        raise CompressError(f"COMPRESS_SP24_W16_PDL={v!r} is not 0, 1 or 2; unset it or pick one")
    return int(v)


# ------------------------------------------------------------------------------------------------ metadata
def chunk_group(mma_group, step):
    """Chunk group (0..31 of a 128-k chunk) that mma group L (0..7) of k-step s (0..3) reads: lane t's value word s
    holds chunk groups 8t + 2s (mma group t) and 8t + 2s + 1 (mma group t + 4) (the .cu header)."""
    lo = mma_group % 4
    return 8 * lo + 2 * step + mma_group // 4


def meta_layout() -> torch.Tensor:
    """(32 lanes, 8 nibbles, 2) -> (row in the 16-row tile, mma group 0..7) that nibble j of lane l's metadata
    register controls, under the selector the lane serves (t / 2 for lane 4 g + t: lanes t = 0, 1 under selector 0,
    t = 2, 3 under 1). Lane (g, t): nibbles 0..3 are row g, mma groups 4 (t % 2) + j; nibbles 4..7 row g + 8, the same
    groups (low 2 bits: the first kept value's position in its group of 4; high 2 bits: the second's).

    The PTX ISA's figure for m16n8k32 .f16 metadata; checked on the GPU by `probe_layout` (tests/test_sp24_w16_gemv.py
    runs it on every GPU run)."""
    out = torch.empty(32, 8, 2, dtype=torch.int64)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(8):
            out[lane, j, 0] = g + 8 * (j // 4)
            out[lane, j, 1] = 4 * (t % 2) + j % 4
    return out


def _register_cells(layout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, chunk groups), each (32 lanes, 2 registers, 8 nibbles): the tile row and the chunk's group of 4 whose
    positions each nibble of each lane's registers holds. Register q of lane 4 g + t serves k-step 2 (t / 2) + q."""
    lanes = torch.arange(32)
    steps = 2 * ((lanes % 4) // 2)[:, None] + torch.arange(2)[None, :]  # (32, 2)
    rows = layout[:, None, :, 0].expand(32, 2, 8)
    groups = chunk_group(layout[:, None, :, 1], steps[:, :, None])
    return rows, groups


def pack_meta_fragments(meta: torch.Tensor, n: int, k: int, layout: torch.Tensor | None = None) -> torch.Tensor:
    """compress.sparse24 meta (N, K/32) int32 -> this GEMV's metadata registers in register order:
    (ceil(N / 16), K / 128, 32 lanes, 2) int32 (kernels.sp24_registers)."""
    rows, groups = _register_cells(meta_layout() if layout is None else layout)
    return sp24_registers.pack(meta, n, k, rows, groups, "pack_meta_fragments")


def unpack_meta_fragments(frag: torch.Tensor, n: int, k: int, layout: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of `pack_meta_fragments` (for tests): back to compress.sparse24 meta (N, K/32) int32."""
    rows, groups = _register_cells(meta_layout() if layout is None else layout)
    return sp24_registers.unpack(frag, n, k, rows, groups)


# ------------------------------------------------------------------------------------------------ build
def compile_variant(arch_code: str, name: str) -> Path:
    warps, kw, depth = VARIANTS[name]
    return cuda_build.compile_library(SRC, name, [f"-DSPW_WARPS={warps}", f"-DSPW_KW={kw}", f"-DSPW_DEPTH={depth}"],
                                      arch_code, "W8A16 2:4 CUDA GEMV", "the Triton kernels serve instead")


def rows_per_cta(name: str) -> int:
    warps, kw, _ = VARIANTS[name]
    return 16 * (warps // kw)


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.sp24_w16_gemv.restype = i
    so.sp24_w16_gemv.argtypes = [p, i, p, p, p, p, p, p, i, i, i, i, i, i, p]
    so.sp24_w16_ctas_per_sm.restype = i
    so.sp24_w16_ctas_per_sm.argtypes = [i, i, i]
    so.sp24_w16_smem_bytes.restype = ctypes.c_long
    so.sp24_w16_smem_bytes.argtypes = [i, i]
    so.sp24_w16_rows_per_cta.restype = i
    so.sp24_w16_variant.restype = i
    so.sp24_w16_probe.restype = i
    so.sp24_w16_probe.argtypes = [p, p]


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device, name: str = DEFAULT_VARIANT) -> ctypes.CDLL:
    key = (cuda_build.arch(device), name)
    return _libraries.get(key, lambda: compile_variant(key[0], name))


def plan(n: int, k: int, m: int, sms: int, name: str, waves: float = DEFAULT_WAVES,
         ctas_per_sm: int = 4) -> tuple[int, int]:
    """(per, split): chunks per CTA and K ranges. The split aims at `waves` x the CTAs resident at once, so that every
    SM keeps weight requests in flight; each extra range costs an fp32 partial per output and token."""
    kc = k // CHUNK_K
    groups = -(-n // rows_per_cta(name))
    want = max(1, int(sms * max(1, ctas_per_sm) * waves))
    split = max(1, min(max(1, kc // VARIANTS[name][1]), want // groups))  # each warp of a tile keeps a chunk
    per = -(-kc // split)
    per = max(1, min(per, STAGED_BYTES // (256 * m)))
    return per, -(-kc // per)


_plans: dict[tuple, tuple[int, int]] = {}


def plan_for(device: torch.device, lib: ctypes.CDLL, name: str, n: int, k: int, m: int, bf16: bool,
             waves: float) -> tuple[int, int]:
    """`plan` with the CTAs resident per SM from the build's occupancy calculator (cached per call shape)."""
    key = (device, name, n, k, m, bf16, waves)
    if key not in _plans:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        occ = lambda per: max(1, lib.sp24_w16_ctas_per_sm(per, m, int(bf16)))  # noqa: E731
        per, _ = plan(n, k, m, sms, name, waves, occ(8))
        _plans[key] = plan(n, k, m, sms, name, waves, occ(per))
    return _plans[key]


_workspace = cuda_build.SplitKWorkspace(torch.float32)


# ------------------------------------------------------------------------------------------------ launch
def _check(what: str, x: torch.Tensor, values: torch.Tensor, w_scale: torch.Tensor, meta_frag: torch.Tensor) -> tuple[int, int]:
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise CompressError(f"{what}: activations must be float16 or bfloat16, got {x.dtype}; cast x first")
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if m > MAX_M:
        raise CompressError(f"{what}: M={m} tokens is more than this GEMV's {MAX_M}; use kernels.sparse24 for more tokens")
    if k % CHUNK_K:
        raise CompressError(f"{what}: in_features={k} is not a multiple of {CHUNK_K}; use kernels.sparse24")
    if values.dtype != torch.int8 or values.dim() != 2 or values.shape[1] != k // 2 or not values.is_contiguous():
        raise CompressError(f"{what}: values {tuple(values.shape)} {values.dtype} do not fit in_features={k}; expected "
                            f"contiguous int8 (N, {k // 2})")
    n = values.shape[0]
    if w_scale.numel() != n or w_scale.dtype != torch.float32:
        raise CompressError(f"{what}: w_scale must be float32 with one scale per output channel (N={n}), got "
                            f"{w_scale.dtype} x {w_scale.numel()}")
    want = (-(-n // 16), k // CHUNK_K, 32, 2)
    if meta_frag is None or tuple(meta_frag.shape) != want or meta_frag.dtype != torch.int32:
        raise CompressError(f"{what}: metadata fragments {None if meta_frag is None else tuple(meta_frag.shape)} do not "
                            f"fit ({n}, {k}); build them with kernels.sp24_w16_gemv.pack_meta_fragments(meta, {n}, {k})")
    if values.data_ptr() % 16 or meta_frag.data_ptr() % 16 or not meta_frag.is_contiguous():
        raise CompressError(f"{what}: values / metadata are not 16-byte aligned contiguous tensors (a view at an "
                            "offset?); pass a clone")
    cuda_build.check_cuda_tensors(what, "use kernels.sparse24.sparse24_w8a16_linear_ref on the CPU", x, values, w_scale,
                                  meta_frag)
    return n, k


def _runs_here(x2: torch.Tensor, values: torch.Tensor, w_scale: torch.Tensor, meta_frag: torch.Tensor) -> bool:
    """The launcher's checks pass for this call on this device (no build); raises only for a malformed setting."""
    if not enabled():
        return False
    pdl_mode(), runtime_variants()  # a malformed setting is the user's to fix, not a path to drop silently
    m = x2.numel() // max(1, x2.shape[-1])
    if x2.device.type != "cuda" or not 1 <= m <= MAX_M:
        return False
    try:
        _check("sp24_w16_gemv", x2, values, w_scale.reshape(-1), meta_frag)
    except CompressError:
        return False
    return True


def _builds(device: torch.device, variant: str) -> bool:
    try:
        build(device, variant)
    except CompressError:
        return False
    return True


def supports(x2: torch.Tensor, values: torch.Tensor, w_scale: torch.Tensor, meta_frag: torch.Tensor,
             variant: str = DEFAULT_VARIANT) -> bool:
    """True when this GEMV can run the call here (launcher checks and a successful build of `variant`); raises only
    for a malformed COMPRESS_SP24_W16_PDL or COMPRESS_SP24_W16_VARIANTS."""
    return _runs_here(x2, values, w_scale, meta_frag) and _builds(x2.device, variant)


def runtime_offers(x2: torch.Tensor, values: torch.Tensor, w_scale: torch.Tensor, meta_frag: torch.Tensor) -> list[str]:
    """The builds of `runtime_variants()` that can run this call here: the launcher's checks once, then each build."""
    if not _runs_here(x2, values, w_scale, meta_frag):
        return []
    return [var for var in runtime_variants() if _builds(x2.device, var)]


@on_input_device
def launch(x2: torch.Tensor, values: torch.Tensor, meta_frag: torch.Tensor, w_scale: torch.Tensor,
           name: str = DEFAULT_VARIANT, waves: float = DEFAULT_WAVES, pdl: int | None = None,
           split: tuple[int, int] | None = None) -> torch.Tensor:
    """The GEMV on x2 (M, K) with 16-byte aligned rows (`_rows`). split = (per, S) overrides the plan (tests, sweeps)."""
    m, k = x2.shape
    n = values.shape[0]
    out = torch.empty(m, n, device=x2.device, dtype=x2.dtype)
    lib = build(x2.device, name)
    bf16 = x2.dtype == torch.bfloat16
    per, s = split or plan_for(x2.device, lib, name, n, k, m, bf16, waves)
    pdl = pdl_mode() if pdl is None else int(pdl)
    ws, cnt = _workspace.get(x2.device, s * m * n if s > 1 else 0, -(-n // rows_per_cta(name)))
    flags = {0: 0, 1: 1, 2: 3}[pdl] | (8 if bf16 else 0)
    ldx = x2.stride(0) if m > 1 else k  # one row: its stride is never read
    rc = lib.sp24_w16_gemv(x2.data_ptr(), ldx, values.data_ptr(), meta_frag.data_ptr(), w_scale.data_ptr(),
                           out.data_ptr(), ws.data_ptr(), cnt.data_ptr(), m, n, k, per, s, flags,
                           cuda_build.stream_handle(x2.device))
    if rc != 0:
        raise CompressError(f"W8A16 2:4 CUDA GEMV: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; M={m}, "
                            f"N={n}, K={k}, per={per}, split={s}, variant {name})")
    return out


def _rows(x: torch.Tensor, k: int) -> torch.Tensor:
    """x as (M, K) rows the kernel reads in 16-byte pieces: unit stride, row stride a multiple of 8, 16-byte aligned."""
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) % 8) or x2.data_ptr() % 16:
        x2 = x2.clone(memory_format=torch.contiguous_format)
    return x2


def _op_impl(x: torch.Tensor, values: torch.Tensor, meta_frag: torch.Tensor, w_scale: torch.Tensor,
             variant: str) -> torch.Tensor:
    _check("sparse24_w8a16_gemv", x, values, w_scale, meta_frag)  # its CompressError reaches the caller as it is
    k = x.shape[-1]
    x2 = _rows(x, k)
    if x2.shape[0] == 0:
        return x.new_empty(*x.shape[:-1], values.shape[0])
    return launch(x2, values, meta_frag, w_scale, name=variant).reshape(*x.shape[:-1], values.shape[0])


_op = torch.library.custom_op("compress::sp24_w16_gemv", _op_impl, mutates_args=())


@_op.register_fake
def _(x, values, meta_frag, w_scale, variant):
    return x.new_empty(*x.shape[:-1], values.shape[0])


@on_input_device
def sparse24_w8a16_gemv(x: torch.Tensor, values: torch.Tensor, meta_frag: torch.Tensor, w_scale: torch.Tensor,
                        bias: torch.Tensor | None = None, variant: str = DEFAULT_VARIANT) -> torch.Tensor:
    """W8A16 on 2:4 weights for at most 8 tokens: x (..., K) fp16/bf16, values int8 (N, K/2), meta_frag from
    `pack_meta_fragments`, w_scale (N,) fp32 -> (..., N) in x's dtype. variant: a build of `VARIANTS`."""
    if variant not in VARIANTS:
        raise CompressError(f"sparse24_w8a16_gemv: variant {variant!r} is not one of {sorted(VARIANTS)}")
    op = _op_impl if direct_call(x, values, meta_frag, w_scale) else torch.ops.compress.sp24_w16_gemv
    y = op(x, values, meta_frag, w_scale.reshape(-1), variant)
    return y + bias if bias is not None else y


# ------------------------------------------------------------------------------------------------ the probe
def probe_layout(device: torch.device | str = "cuda") -> dict:
    """Run the .cu's fragment probe on the GPU and decode it: {"a": {(lane, half): (row, kept column)},
    "meta": {(selector, lane, nibble): (row, mma group) or None}, "a_ok", "meta_ok": whether they match the layouts
    this module packs for (the A layout of the .cu header; `meta_layout` for each lane under its selector)}."""
    dev = torch.device(device)
    out = torch.zeros(4096 + 16384, dtype=torch.int32, device=dev)
    rc = build(dev).sp24_w16_probe(out.data_ptr(), cuda_build.stream_handle(dev))
    if rc != 0:
        raise CompressError(f"sp24_w16_probe failed with code {rc}")
    got = out.cpu().tolist()
    a_map = {(w // 8, w % 8): cell for w, cell in enumerate(sp24_registers.decode_one_hot_probe(got, 256))}
    meta_map = {}
    for sel in range(2):
        for c in range(256):
            lane, j = c // 8, c % 8
            base = 4096 + (256 * sel + c) * 32
            hits = [m for m in range(16) if got[base + 2 * m] != 0]
            meta_map[(sel, lane, j)] = (hits[0], got[base + 2 * hits[0] + 1] - 1) if len(hits) == 1 else None
    layout = meta_layout()
    # a_r of lane (g, t): r = 0 row g, kept 2t, 2t + 1; r = 1 row g + 8; r = 2 row g, kept 2t + 8, +9; r = 3 row g + 8
    a_want = {(lane, h): (lane // 4 + 8 * ((h // 2) % 2), 2 * (lane % 4) + h % 2 + 8 * (h // 4))
              for lane in range(32) for h in range(8)}
    meta_want = {(lane % 4 // 2, lane, j): (int(layout[lane, j, 0]), int(layout[lane, j, 1]))
                 for lane in range(32) for j in range(8)}
    meta_ok = all(meta_map[key] == want for key, want in meta_want.items())
    return {"a": a_map, "meta": meta_map, "a_ok": a_map == a_want, "meta_ok": meta_ok}
