"""CUDA C++ int8 tensor-core GEMV for 1..64 tokens (kernels/csrc/i8_gemv.cu; 1..16 before session 11): W8A8 on dense int8 weights and W8A8
on 2:4 int8 weights (compress.sparse24 values) through the sparse tensor cores. Built with nvcc on first use
(kernels/cuda_build.py), loaded through ctypes, launched on torch's current stream after the activation quantizer
(kernels.w8a8.quantize_per_token), with programmatic dependent launch so its weight copies start while the
quantizer runs.

Math: the W8A8 math of kernels/w8a8.py, bit for bit (int32 sums, then * s_x, then * s_w in fp32); references
`kernels.w8a8.w8a8_linear_ref` and `kernels.sparse24.sparse24_w8a8_linear_ref`.

Why: the 2:4 int8 GEMV in Triton (kernels/sparse24.py) gathers every kept activation in software and its tensor-core
kernel expands tiles to dense, which put 2:4 int8 layers at 0.14-0.75x of dense W8A8 at 2..8 tokens; the sparse tensor
cores take the 2-bit positions as they are. Measured on the H100 (bench/results/h100/kernels_s10_i8/README.md): 2:4
int8 at M = 2 / 4 / 8 / 16 1.06x / 1.20x / 1.02x / 0.89x of dense W8A8 (median of 7 Llama-3 shapes), about session 5's
kernel at M = 1. The dense mode lost to kernels/w8a8.py and the runtime's dp4a GEMV on every shape at 1, 4 and 16 tokens,
so the runtime offers only the 2:4 mode (`compress.runtime.formats_compress.Sparse24Linear`, path "cuda_sp24"); the
dense mode stays as its twin for the sweeps and the tests. Session 11: 17..64 tokens run 4 or 8 token tiles; before,
2:4 int8 layers there fell back to a dense temporary (0.08-0.33x of fp16 at 32 and 64 tokens on the Llama-3 shapes).

Layouts:
- dense: the checkpoint's int8 (N, K) rows as they are (compressed-tensors), K a multiple of 64.
- 2:4: the compress.sparse24 values (N, K / 2) as they are, K a multiple of 128; the 2-bit positions are repacked
  once at load into the sparse mma's metadata registers, in register order (`pack_meta_fragments`): for each 16-row
  group and 128-k block, 32 lanes x 2 fragments of one uint32 each, the same bytes as the row-major meta.

Public: `w8a8_gemv` / `sparse24_w8a8_gemv` (custom ops compress::i8_gemv_w8a8 / compress::i8_gemv_sparse24), `supports`,
`pack_meta_fragments`, `probe_sparse_layout` (the GPU measurement behind the metadata layout), `build`, `plan`.
COMPRESS_I8_GEMV=0 turns the kernel off (the runtime then offers only its other paths).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from compress.errors import CompressError
from kernels import cuda_build, sp24_registers
from kernels.op_dispatch import direct_call, on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "i8_gemv.cu"
MAX_M = 64  # eight mma n-tiles of 8 tokens (session 11; 16 before)
DENSE_BLOCK_K = 64  # k per 64-byte block of a dense row
SPARSE_BLOCK_K = 128  # logical k per 64-byte block of 2:4 values
# Build variants: name -> (warps per CTA, blocks per ring slot, ring slots per warp). A CTA owns 16 rows per warp; a
# warp's ring holds slots x blocks x 1 KB of weights (+ 256 B of metadata per block for 2:4), slots - 1 in flight.
# Session 10, call 2 (bench/results/h100/kernels_s10_i8/): 8- and 16-block slots (512 / 1024 contiguous bytes of a row
# per copy round: w4b8s3, w8b8s2, w4b8s4, w2b16s3) were no faster than the 2-block ones on any layer at M = 1 and up
# to 2.6x slower, so DRAM page locality is not what held the streaming back; they are not built.
VARIANTS = {"w8b2s4": (8, 2, 4), "w4b2s4": (4, 2, 4), "w8b2s3": (8, 2, 3), "w16b2s2": (16, 2, 2), "w4b4s3": (4, 4, 3),
            "w8b4s3": (8, 4, 3)}
DEFAULT_VARIANT = "w8b2s4"
# waves = CTAs launched / CTAs resident at once (see `plan`); <= 1 keeps every CTA resident from the start. Session 10,
# call 1 (rotate timing, geometric mean over the 8 Llama-3 shapes, 2:4): w8b2s4 was the fastest of the 5 builds x
# waves 0.5 / 1 at every M; waves 0.5 at M = 1 / 4 (17.13 / 18.24 us; 1.0: 17.27 / 18.63), 1.0 at M = 16 (23.42;
# 0.5: 23.85).
DEFAULT_WAVES = 1.0
FEW_TOKEN_WAVES = 0.5  # up to 8 tokens (one token tile)
MIN_BLOCKS = 2
STAGED_BYTES = 32 * 1024  # staged activations per CTA at most, up to 16 tokens
# Beyond 16 tokens a 2:4 block stages 4 KB (32 tokens) or 8 KB (64): at 32 KB a CTA's K chunk would shrink to 4 blocks
# and the split (one int32 add per output, token and chunk) grow with M; 96 KB keeps 12 blocks at 64 tokens (as the
# W4A16 GEMV's STAGED_BYTES_WIDE).
STAGED_BYTES_WIDE = 96 * 1024
SMEM_BYTES = 200 * 1024
PDL_DEFAULT = 2  # 0 plain launches, 1 programmatic dependent launch, 2 the same with the weights read before the wait
# One token and at most this many weights (N x K): every CTA quantizes the activations itself (the .cu's flag bit 4:
# each CTA reads the token's whole row from L2 for its absmax instead of waiting for a quantizer kernel to finish).
# Session 10, call 2 (w8b2s4, 2:4, us, quantizer kernel -> in-kernel): M = 1 8B q/o 9.14 -> 8.92, 8B k/v 6.20 -> 5.33,
# 70B k/v 7.33 -> 6.64; 70B q/o 22.66 -> 22.46; slower on the wide layers (8B gate/up 18.96 -> 21.28, 8B down
# 20.83 -> 21.02, 70B gate/up 65.6 -> 72.5) and at M = 4 on every shape (8B k/v 6.92 -> 7.55), where the CTAs' row
# reads cost more than the launch they save. Call 4's table, with the rule M x K <= 8192, confirmed it (M = 2 on 8B
# gate/up 22.3 us, M = 4 18.2).
QIN_MAX_WEIGHTS = 1 << 25
# COMPRESS_I8_GEMV_CHAIN=1: the quantizer kernel itself is launched under programmatic dependent launch (its launch
# overlaps the previous kernel's tail). Off by default: session 10, call 5 (bench/results/h100/kernels_s10_i8/call5/
# ab.log, one process, M = 1): faster on 8B gate/up (18.44 -> 17.60 us), slower on 8B down (20.19 -> 23.24) and 70B
# q/o (21.98 -> 24.73), within noise elsewhere.
CHAIN_DEFAULT = "0"


def default_waves(m: int) -> float:
    return FEW_TOKEN_WAVES if m <= 8 else DEFAULT_WAVES


def qin_default(m: int, n: int, k: int) -> bool:
    return m == 1 and n * k <= QIN_MAX_WEIGHTS


def chain_mode() -> bool:
    v = os.environ.get("COMPRESS_I8_GEMV_CHAIN", CHAIN_DEFAULT)
    if v not in ("0", "1"):
        raise CompressError(f"COMPRESS_I8_GEMV_CHAIN={v!r} is not 0 or 1; unset it or pick one")
    return v == "1"


_RC = {-1: "M outside 1..64", -3: "bad split-K plan", -4: "shared memory over the device's per-block limit",
       -5: "K not a multiple of the block (64 dense, 128 for 2:4), ldx not a multiple of 16, or no metadata"}


def enabled() -> bool:
    return os.environ.get("COMPRESS_I8_GEMV", "1") != "0"


def block_k(sparse: bool) -> int:
    return SPARSE_BLOCK_K if sparse else DENSE_BLOCK_K


# ------------------------------------------------------------------------------------------------ 2:4 metadata
def fragment_group(g: torch.Tensor | int, f: int):
    """Block group (0..31 of a 128-k block) that mma group g (0..15) of fragment f reads: lane t's 16 value bytes are
    block groups 8t..8t+7, fragment f takes 4 of them (the .cu header)."""
    hi = g // 8
    lo = g % 8
    return 8 * (lo // 2) + 4 * f + 2 * hi + lo % 2


def meta_layout() -> torch.Tensor:
    """(32 lanes, 8 nibbles, 2) -> (row in the 16-row tile, mma group 0..15) that nibble j of lane l's metadata
    register controls, for mma.sp m16n8k64 .s8 with selector 0: lane (g, t) holds row g + 8 (t % 2), mma groups
    8 (t / 2) + j, one nibble each (low 2 bits: the first kept value's position in its group of 4; high 2 bits: the
    second's). So a lane's metadata describes values that its quad's other lanes hold, not its own.

    Measured on the H100 (session 10, `probe_sparse_layout`; tests/test_i8_gemv.py checks it on every GPU run): the
    lane-local guess (nibble j = the lane's own value bytes 2j, 2j + 1) was wrong."""
    out = torch.empty(32, 8, 2, dtype=torch.int64)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(8):
            out[lane, j, 0] = g + 8 * (t % 2)
            out[lane, j, 1] = 8 * (t // 2) + j
    return out


def _register_cells(layout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, block groups), each (32 lanes, 2 fragments, 8 nibbles): the 16-row tile's row and the 128-k block's
    group of 4 whose positions each nibble of each lane's metadata register holds."""
    rows = layout[:, :, 0][:, None, :].expand(32, 2, 8)
    groups = torch.stack([fragment_group(layout[:, :, 1], f) for f in (0, 1)], dim=1)
    return rows, groups


def pack_meta_fragments(meta: torch.Tensor, n: int, k: int, layout: torch.Tensor | None = None) -> torch.Tensor:
    """compress.sparse24 meta (N, K/32) int32 -> the sparse mma's metadata registers in register order:
    (ceil(N / 16), K / 128, 32 lanes, 2 fragments) int32 (kernels.sp24_registers)."""
    rows, groups = _register_cells(meta_layout() if layout is None else layout)
    return sp24_registers.pack(meta, n, k, rows, groups, "pack_meta_fragments")


def unpack_meta_fragments(frag: torch.Tensor, n: int, k: int, layout: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of `pack_meta_fragments` (for tests): back to compress.sparse24 meta (N, K/32) int32."""
    rows, groups = _register_cells(meta_layout() if layout is None else layout)
    return sp24_registers.unpack(frag, n, k, rows, groups)


# ------------------------------------------------------------------------------------------------ build
def compile_variant(arch_code: str, name: str) -> Path:
    warps, blocks, slots = VARIANTS[name]
    flags = [f"-DI8_WARPS={warps}", f"-DI8_SB={blocks}", f"-DI8_STAGES={slots}"]
    return cuda_build.compile_library(SRC, name, flags, arch_code, "int8 CUDA GEMV", "the Triton kernels serve instead")


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.i8_gemv.restype = i
    so.i8_gemv.argtypes = [p, i, p, p, p, p, p, p, p, i, i, i, i, i, i, p]
    so.i8_gemv_ctas_per_sm.restype = i
    so.i8_gemv_ctas_per_sm.argtypes = [i, i, i]
    so.i8_gemv_smem_bytes.restype = ctypes.c_long
    so.i8_gemv_smem_bytes.argtypes = [i, i, i]
    so.i8_gemv_rows_per_cta.restype = i
    so.i8_gemv_variant.restype = i
    so.i8_sp_probe.restype = i
    so.i8_sp_probe.argtypes = [p, p]


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device, name: str = DEFAULT_VARIANT) -> ctypes.CDLL:
    key = (cuda_build.arch(device), name)
    return _libraries.get(key, lambda: compile_variant(key[0], name))


def pdl_mode() -> int:
    v = os.environ.get("COMPRESS_I8_GEMV_PDL", str(PDL_DEFAULT))
    if v not in ("0", "1", "2"):
        raise CompressError(f"COMPRESS_I8_GEMV_PDL={v!r} is not 0, 1 or 2; unset it or pick one")
    return int(v)


def _xs_block_bytes(m: int, sparse: bool) -> int:
    """Staged activation bytes per block: 32 lanes x 16 bytes per fragment and token tile (the .cu)."""
    return (2 if sparse else 1) * token_tiles(m) * 512


def token_tiles(m: int) -> int:
    """mma n-tiles of 8 tokens the kernel runs for M tokens (the .cu's token_tiles)."""
    return 8 if m > 32 else 4 if m > 16 else 2 if m > 8 else 1


def smem_bytes(per: int, m: int, name: str, sparse: bool) -> int:
    """Shared memory of one CTA (the .cu's smem_bytes): weight rings, staged activations."""
    warps, blocks, slots = VARIANTS[name]
    slot = 16 * blocks * 64 + (blocks * 256 if sparse else 0)
    return warps * slots * slot + per * _xs_block_bytes(m, sparse)


def plan(n: int, k: int, m: int, sms: int, name: str, sparse: bool, waves: float = DEFAULT_WAVES,
         ctas_per_sm: int = 2) -> tuple[int, int]:
    """(per, split): blocks per CTA and K chunks. The split aims at `waves` x the CTAs resident at once, so that every
    SM keeps copies in flight; each extra chunk costs one int32 atomic add per output and token."""
    kblocks = k // block_k(sparse)
    rows = 16 * VARIANTS[name][0]
    groups = -(-n // rows)
    want = max(1, int(sms * max(1, ctas_per_sm) * waves))
    split = max(1, min(kblocks, want // groups))
    per = max(-(-kblocks // split), min(MIN_BLOCKS, kblocks))
    per = max(1, min(per, (STAGED_BYTES if m <= 16 else STAGED_BYTES_WIDE) // _xs_block_bytes(m, sparse)))
    while per > 1 and smem_bytes(per, m, name, sparse) > SMEM_BYTES:
        per -= 1
    return per, -(-kblocks // per)


_plans: dict[tuple, tuple[int, int]] = {}


def plan_for(device: torch.device, lib: ctypes.CDLL, name: str, n: int, k: int, m: int, sparse: bool,
             waves: float) -> tuple[int, int]:
    """`plan` with the CTAs resident per SM from the build's occupancy calculator (cached per call shape)."""
    key = (device, name, n, k, m, sparse, waves)
    if key not in _plans:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        occ = lambda per: max(1, lib.i8_gemv_ctas_per_sm(per, m, int(sparse)))  # noqa: E731
        per, _ = plan(n, k, m, sms, name, sparse, waves, occ(8))
        _plans[key] = plan(n, k, m, sms, name, sparse, waves, occ(per))
    return _plans[key]


_workspace = cuda_build.SplitKWorkspace(torch.int32, zeroed=True)  # int32 sums, zero between launches


# ------------------------------------------------------------------------------------------------ launch
def _check(what: str, x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, sparse: bool,
           meta_frag: torch.Tensor | None) -> tuple[int, int]:
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise CompressError(f"{what}: activations must be float16 or bfloat16, got {x.dtype}; cast x first")
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if m > MAX_M:
        raise CompressError(f"{what}: M={m} tokens is more than this GEMV's {MAX_M}; use kernels.w8a8 for larger batches")
    if k % block_k(sparse):
        raise CompressError(f"{what}: in_features={k} is not a multiple of {block_k(sparse)}; use the Triton kernels")
    want_k = k // 2 if sparse else k
    if w.dtype != torch.int8 or w.dim() != 2 or w.shape[1] != want_k or not w.is_contiguous():
        raise CompressError(f"{what}: weights {tuple(w.shape)} {w.dtype} do not fit in_features={k}; expected contiguous "
                            f"int8 (N, {want_k})")
    n = w.shape[0]
    if w_scale.numel() != n or w_scale.dtype != torch.float32:
        raise CompressError(f"{what}: w_scale must be float32 with one scale per output channel (N={n}), got "
                            f"{w_scale.dtype} x {w_scale.numel()}")
    if sparse and (meta_frag is None or tuple(meta_frag.shape) != (-(-n // 16), k // SPARSE_BLOCK_K, 32, 2)):
        raise CompressError(f"{what}: metadata fragments {None if meta_frag is None else tuple(meta_frag.shape)} do not "
                            f"fit ({n}, {k}); build them with pack_meta_fragments(meta, {n}, {k})")
    if w.data_ptr() % 16 or (meta_frag is not None and meta_frag.data_ptr() % 16):
        raise CompressError(f"{what}: weights are not 16-byte aligned (a view at an offset?); pass a clone")
    cuda_build.check_cuda_tensors(what, "use the *_ref functions on the CPU", x, w, w_scale, meta_frag)
    return n, k


def supports(x2: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, meta_frag: torch.Tensor | None = None) -> bool:
    """True when this GEMV can run the call here (launcher checks and a successful build); raises only for a
    malformed COMPRESS_I8_GEMV_PDL / COMPRESS_I8_GEMV_CHAIN."""
    sparse = meta_frag is not None
    m = x2.numel() // max(1, x2.shape[-1])
    if not enabled():
        return False
    # A malformed setting is the user's to fix, not a path to drop silently (the PathTable skips paths that raise).
    pdl_mode(), chain_mode()
    if x2.device.type != "cuda" or not 1 <= m <= MAX_M:
        return False
    try:
        _check("i8_gemv", x2, w, w_scale, sparse, meta_frag)
        build(x2.device)
    except CompressError:
        return False
    return True


@on_input_device
def launch_quantized(xq: torch.Tensor, sx: torch.Tensor | None, w: torch.Tensor, w_scale: torch.Tensor,
                     out_dtype: torch.dtype, meta_frag: torch.Tensor | None = None, name: str = DEFAULT_VARIANT,
                     waves: float | None = None, pdl: int | None = None,
                     split: tuple[int, int] | None = None) -> torch.Tensor:
    """The GEMV on activations already quantized: xq (M, K) int8 contiguous, sx (M,) fp32; or, with sx None, on the
    fp16 / bf16 x (M, K) itself (contiguous rows), which every CTA quantizes (the in-kernel quantizer). split =
    (per, S) overrides the plan (tests); waves None: `default_waves(M)`."""
    sparse = meta_frag is not None
    qin = sx is None
    m, k = xq.shape
    n = w.shape[0]
    out = torch.empty(m, n, device=xq.device, dtype=out_dtype)
    lib = build(xq.device, name)
    waves = default_waves(m) if waves is None else waves
    per, s = split or plan_for(xq.device, lib, name, n, k, m, sparse, waves)
    pdl = pdl_mode() if pdl is None else int(pdl)
    rows = 16 * VARIANTS[name][0]
    ws, cnt = _workspace.get(xq.device, m * n if s > 1 else 0, -(-n // rows))
    flags = {0: 0, 1: 1, 2: 3}[pdl] | (4 if sparse else 0) | (8 if out_dtype == torch.bfloat16 else 0) | (16 if qin else 0)
    rc = lib.i8_gemv(xq.data_ptr(), xq.stride(0), None if qin else sx.data_ptr(), w.data_ptr(),
                     None if meta_frag is None else meta_frag.data_ptr(), w_scale.data_ptr(), out.data_ptr(),
                     ws.data_ptr(), cnt.data_ptr(), m, n, k, per, s, flags,
                     cuda_build.stream_handle(xq.device))
    if rc != 0:
        raise CompressError(f"int8 CUDA GEMV: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; M={m}, N={n}, "
                            f"K={k}, per={per}, split={s}, sparse={sparse}, variant {name})")
    return out


def _launch(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, meta_frag: torch.Tensor | None,
            **kw) -> torch.Tensor:
    from kernels.w8a8 import quantize_per_token

    what = "sparse24_w8a8_gemv" if meta_frag is not None else "w8a8_gemv"
    n, k = _check(what, x, w, w_scale.reshape(-1), meta_frag is not None, meta_frag)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k).contiguous()
    if x2.data_ptr() % 16:  # a view at an odd offset: the in-kernel quantizer reads 16-byte vectors
        x2 = x2.clone()
    if x2.shape[0] == 0:
        return x.new_empty(*lead, n)
    pdl = pdl_mode() if kw.get("pdl") is None else int(kw["pdl"])
    kw["pdl"] = pdl
    qin = kw.pop("qin", None)
    if qin if qin is not None else qin_default(x2.shape[0], n, k):
        return launch_quantized(x2, None, w, w_scale.reshape(-1), x.dtype, meta_frag, **kw).reshape(*lead, n)
    # The quantizer lets this kernel launch right away (EARLY); with COMPRESS_I8_GEMV_CHAIN=1 it is itself launched
    # under programmatic dependent launch (it waits for the kernel before it before reading x, so only its launch
    # overlaps that kernel's tail). The exact-reciprocal codes are the same bits as a division.
    chain = kw.pop("chain", None)
    chain = chain_mode() if chain is None else chain
    xq, sx = quantize_per_token(x2, early=pdl > 0, chain=pdl > 0 and chain, recip=True)
    return launch_quantized(xq, sx, w, w_scale.reshape(-1), x.dtype, meta_frag, **kw).reshape(*lead, n)


def _w8a8_op_impl(x: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    return _launch(x, weight, w_scale, None)


_w8a8_op = torch.library.custom_op("compress::i8_gemv_w8a8", _w8a8_op_impl, mutates_args=())


@_w8a8_op.register_fake
def _(x, weight, w_scale):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _sparse24_op_impl(x: torch.Tensor, values: torch.Tensor, meta_frag: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    return _launch(x, values, w_scale, meta_frag)


_sparse24_op = torch.library.custom_op("compress::i8_gemv_sparse24", _sparse24_op_impl, mutates_args=())


@_sparse24_op.register_fake
def _(x, values, meta_frag, w_scale):
    return x.new_empty(*x.shape[:-1], values.shape[0])


@on_input_device
def w8a8_gemv(x: torch.Tensor, weight: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 for at most 64 tokens: x (..., K) fp16/bf16, weight int8 (N, K), w_scale (N,) fp32 -> (..., N)."""
    if direct_call(x, weight, w_scale):  # eager: the launcher itself (kernels.op_dispatch)
        y = _w8a8_op_impl(x, weight, w_scale.reshape(-1))
    else:
        _check("w8a8_gemv", x, weight, w_scale.reshape(-1), False, None)  # here too: the custom op would wrap the error
        y = torch.ops.compress.i8_gemv_w8a8(x, weight, w_scale.reshape(-1))
    return y + bias if bias is not None else y


@on_input_device
def sparse24_w8a8_gemv(x: torch.Tensor, values: torch.Tensor, meta_frag: torch.Tensor, w_scale: torch.Tensor,
                       bias: torch.Tensor | None = None) -> torch.Tensor:
    """W8A8 on 2:4 weights for at most 64 tokens: values int8 (N, K/2), meta_frag from `pack_meta_fragments`."""
    if direct_call(x, values, meta_frag, w_scale):  # eager: the launcher itself (kernels.op_dispatch)
        y = _sparse24_op_impl(x, values, meta_frag, w_scale.reshape(-1))
    else:
        _check("sparse24_w8a8_gemv", x, values, w_scale.reshape(-1), True, meta_frag)
        y = torch.ops.compress.i8_gemv_sparse24(x, values, meta_frag, w_scale.reshape(-1))
    return y + bias if bias is not None else y


# ------------------------------------------------------------------------------------------------ the probe
def probe_sparse_layout(device: torch.device | str = "cuda") -> dict:
    """Run the .cu's fragment probe on the GPU and decode it: {"a": {(lane, byte): (row, value column)},
    "meta": {(lane, nibble): (row, mma group)}, "a_ok", "meta_ok": whether they match the layouts this module packs
    for (`meta_layout`, the dense A layout)}. Values that decode to nothing sensible are recorded as None."""
    dev = torch.device(device)
    out = torch.zeros(16384, dtype=torch.int32, device=dev)
    rc = build(dev).i8_sp_probe(out.data_ptr(), cuda_build.stream_handle(dev))
    if rc != 0:
        raise CompressError(f"i8_sp_probe failed with code {rc}")
    got = out.cpu().tolist()
    a_map = {(w // 16, w % 16): cell for w, cell in enumerate(sp24_registers.decode_one_hot_probe(got, 512))}
    meta_map = {}
    for c in range(256):
        lane, j = c // 8, c % 8
        hits = [m for m in range(16) if got[8192 + c * 32 + 2 * m] != 0]
        meta_map[(lane, j)] = (hits[0], got[8192 + c * 32 + 2 * hits[0] + 1] - 1) if len(hits) == 1 else None
    layout = meta_layout()
    a_want = {(lane, byte): ((lane // 4) + 8 * ((byte // 4) % 2), 4 * (lane % 4) + byte % 4 + 16 * (byte // 8))
              for lane in range(32) for byte in range(16)}
    meta_want = {(lane, j): (int(layout[lane, j, 0]), int(layout[lane, j, 1])) for lane in range(32) for j in range(8)}
    return {"a": a_map, "meta": meta_map, "a_ok": a_map == a_want, "meta_ok": meta_map == meta_want}

