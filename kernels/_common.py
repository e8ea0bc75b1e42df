"""Helpers shared by the kernel launchers: input checks, split-K planning and the split-K reduction."""

from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl

from compress.errors import CompressError
from kernels.cuda_build import capability, device_index, one_device

FLOAT_DTYPES = (torch.float16, torch.bfloat16)
_TL_DTYPE = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}

# Multiprocessor count of the H100 SXM; used only when no CUDA device is visible (interpreter runs).
_DEFAULT_SMS = 132


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def pdl_enabled(device: torch.device) -> bool:
    """Whether kernels launch with programmatic dependent launch on `device` (the decode step's kernels,
    compress/runtime/decode_kernels.py, and the W4A16 tensor-core tiles): Hopper or later, never in Triton's
    CPU interpreter (no inline asm there); COMPRESS_DECODE_PDL=0 turns it off (A/B runs)."""
    if device.type != "cuda" or interpreting():
        return False
    if os.environ.get("COMPRESS_DECODE_PDL", "1") == "0":
        return False
    return capability(device) >= (9, 0)


def _fix_interpreter_scalar_index() -> None:
    """Triton 3.6's interpreter keeps scalars as 1-element arrays and converts them with int(array),
    which NumPy >= 2.3 rejects ("only 0-dimensional arrays can be converted"), so any `range(a, b)`
    over kernel arguments fails on CPU. Convert through .item() instead (interpreter runs only)."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_compress_index_fix", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._compress_index_fix = True
    interpreter._patch_lang_tensor = patched


if interpreting():
    _fix_interpreter_scalar_index()


def interpreter_dot_f32(dtype: torch.dtype) -> bool:
    """Triton 3.6's CPU interpreter runs tl.dot on bf16 operands as raw integers (NumPy has no bf16);
    kernels take this flag to upcast dot operands to fp32 there. Never set on a GPU."""
    return interpreting() and dtype == torch.bfloat16


_SMS: dict[int, int] = {}


def num_sms(device: torch.device) -> int:
    """Multiprocessors of a CUDA device (cached per device index: the launchers ask on every call), _DEFAULT_SMS
    elsewhere."""
    if device.type != "cuda":
        return _DEFAULT_SMS
    idx = device_index(device)
    if idx not in _SMS:
        _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SMS[idx]


def check_device(what: str, *tensors: torch.Tensor | None) -> None:
    """Every tensor on one device; that device is CUDA unless the Triton interpreter is on."""
    dev = one_device(what, *tensors)
    if dev.type != "cuda" and not interpreting():
        raise CompressError(
            f"{what}: Triton kernels need a CUDA device, got {dev}; use the *_ref function on CPU "
            "(or set TRITON_INTERPRET=1 for slow kernel emulation)"
        )


def check_activation(what: str, x: torch.Tensor, k: int) -> torch.Tensor:
    """x must be (..., K) fp16/bf16; returns it as a contiguous (M, K) view."""
    if x.dtype not in FLOAT_DTYPES:
        raise CompressError(f"{what}: activations must be float16 or bfloat16, got {x.dtype}; cast x first")
    if x.shape[-1] != k:
        raise CompressError(f"{what}: x has in_features={x.shape[-1]} but the weight has in_features={k}")
    return x.reshape(-1, k).contiguous()


def tl_dtype(dtype: torch.dtype):
    return _TL_DTYPE[dtype]


def plan_split_k(tiles: int, k_steps: int, device: torch.device, waves: float = 2.0) -> int:
    """Split the K loop until the grid holds about `waves` programs per multiprocessor.

    Why: at decode sizes (e.g. N=4096 with 128-wide tiles = 32 programs) a plain grid leaves most of
    the 132 SMs idle; splitting K trades one small reduction launch for full memory parallelism.
    """
    want = int(num_sms(device) * waves)
    if tiles >= want or k_steps <= 1:
        return 1
    split = min(k_steps, triton.cdiv(want, tiles))
    # Even chunks: recompute so that no split is empty.
    steps_per = triton.cdiv(k_steps, split)
    return triton.cdiv(k_steps, steps_per)


def config_split(tiles: int, k_steps: int, cfg: dict, device: torch.device) -> int:
    """K splits a launcher's config asks for: "split" as given; "fit" n: the most that keep the grid within n programs
    per SM (rounded down), each >= 2 K steps; else "waves" programs per SM, rounded up (`plan_split_k`, default 2;
    e.g. 8B down at M = 16 in 64-row W8A8 tiles: 64 tiles x 3 = 192 programs, 2 on 60 SMs and 1 on the other 72).
    The W8A8 GEMM and the 2:4 kernels take their splits from here."""
    if cfg.get("split"):
        return cfg["split"]
    if cfg.get("fit"):
        return max(1, min(cfg["fit"] * num_sms(device) // tiles, k_steps // 2))
    return plan_split_k(tiles, k_steps, device, cfg.get("waves") or 2.0)


def config_chunks(tiles: int, k_steps: int, cfg: dict, device: torch.device) -> tuple[int, int]:
    """(splits, K steps per split) for `config_split`'s split, re-evened so that no split is empty."""
    per = triton.cdiv(k_steps, config_split(tiles, k_steps, cfg, device))
    return triton.cdiv(k_steps, per), per


def plan_split_fill(tiles: int, k_steps: int, device: torch.device, fill: float = 1.0) -> int:
    """The largest K split whose grid stays within `fill` programs per multiprocessor (rounding down; at least 1).

    Why rounding down: the W4A16 tensor-core tiles at 16..64 tokens hold one (fill 1) or two (fill 2) programs per
    SM, and one program more than a wave leaves the whole second wave's time to a few SMs. Session 12's H100 sweep
    (bench/results/h100/kernels_s12/) found the fastest split of every tile in that grid: 128 programs for
    32 tiles, not the 264 that plan_split_k's rounding up asks for.
    """
    split = max(1, min(k_steps, int(num_sms(device) * fill) // max(1, tiles)))
    steps_per = triton.cdiv(k_steps, split)
    return triton.cdiv(k_steps, steps_per)


def config_chain(cfg: dict) -> int:
    """Config key "chain" -> the kernels' CHAIN constexpr: 0 off, 1 (True / 1) trigger the next kernel at the
    program's start, 2 ("late") after its K loop."""
    c = cfg.get("chain", 0)
    return 2 if c == "late" else int(bool(c))


def pow2_floor(v: int) -> int:
    """Largest power of two <= v, at least 128 (bytes of a PDL prefetch: whole 128-byte lines, a tl.arange length)."""
    return 1 << (max(v, 128).bit_length() - 1)


@triton.jit
def splitk_epilogue(vals, out_ptrs, mask, ws_ptr, lock_ptr, local, tile_id, pid_s, S, TILE: tl.constexpr,
                    ROUND: tl.constexpr = 1):
    """Write a program's fp32 result: directly when S == 1, else through split-K in one launch.

    Each of the S programs of an output tile stores its partial to the workspace and bumps the tile's
    counter; the last to arrive sums the S partials in fixed order (deterministic), writes the output
    and resets the counter to 0 for the next call (so the lock buffer is reusable, also inside CUDA
    graphs). Why not a second reduction kernel: at decode sizes its launch costs as much as the
    GEMV itself.
    `local` indexes the tile's elements 0..TILE-1 in the same shape as vals.
    ROUND: partials loaded per round of the sum (1 or 4). Why 4: the last program's sum is on the critical
    path of the whole launch, and one partial per round waits a full L2 round trip per split (at 64 tokens
    a 32 KB partial per split); four loads in flight hide some of that. The sum's order is the same: a
    split past S loads 0.0, and acc + 0.0 == acc bit for bit (acc starts at +0.0 and never becomes -0.0).
    Measured (session 12, H100, same process): the W4A16 tensor-core tiles at 16..64 tokens 0-5% faster on the
    small layers, the W8A8 GEMM at 4..16 tokens within +-1.5% (bench/results/h100/kernels_s12/README.md). Only
    the W4A16 tiles ask for 4; the other kernels keep 1, the tail they were tuned and measured with.
    """
    if S == 1:
        tl.store(out_ptrs, vals.to(out_ptrs.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptr + (tile_id * S + pid_s) * TILE + local, vals, cache_modifier=".cg")
        tl.debug_barrier()  # every thread's partial is written before the counter moves
        count = tl.atomic_add(lock_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
        tl.debug_barrier()
        if count == S - 1:
            part = ws_ptr + tile_id * S * TILE + local
            acc = tl.zeros_like(vals)
            if ROUND == 4:
                for s in range(0, S, 4):
                    p0 = tl.load(part + s * TILE, cache_modifier=".cg")
                    p1 = tl.load(part + (s + 1) * TILE, mask=s + 1 < S, other=0.0, cache_modifier=".cg")
                    p2 = tl.load(part + (s + 2) * TILE, mask=s + 2 < S, other=0.0, cache_modifier=".cg")
                    p3 = tl.load(part + (s + 3) * TILE, mask=s + 3 < S, other=0.0, cache_modifier=".cg")
                    acc += p0
                    acc += p1
                    acc += p2
                    acc += p3
            else:
                for s in range(0, S):
                    acc += tl.load(part + s * TILE, cache_modifier=".cg")
            tl.store(out_ptrs, acc.to(out_ptrs.dtype.element_ty), mask=mask)
            tl.atomic_xchg(lock_ptr + tile_id, 0)


@triton.jit
def swap_ab_pids(M_FAST: tl.constexpr):
    """(token tile, weight tile) of a "swap AB" program (weights on the left, tokens on the right): the grid is
    (m tiles, n tiles, split) with M_FAST (the token tiles of one weight tile side by side, so its weights come from
    DRAM once and from L2 for the others), else (n tiles, m tiles, split)."""
    if M_FAST:
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
    else:
        pid_m = tl.program_id(1)
        pid_n = tl.program_id(0)
    return pid_m, pid_n


@triton.jit
def swap_ab_store(out, out_ptr, stride_om, offs_n, n_mask, offs_m, m_mask, ws_ptr, lock_ptr, pid_n, pid_m, pid_s, S, N,
                  BN: tl.constexpr, BM: tl.constexpr, ROUND: tl.constexpr = 1):
    """Write a swap-AB program's fp32 (BN weight rows, BM tokens) tile to out (M, N), through split-K when S > 1
    (`splitk_epilogue`; the tile's id counts weight tiles fastest)."""
    ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    local = tl.arange(0, BN)[:, None] * BM + tl.arange(0, BM)[None, :]
    splitk_epilogue(out, ptrs, n_mask[:, None] & m_mask[None, :], ws_ptr, lock_ptr, local, pid_m * tl.cdiv(N, BN) + pid_n,
                    pid_s, S, BN * BM, ROUND)


_LOCKS: dict[torch.device, torch.Tensor] = {}
MAX_TILES = 1 << 16


def splitk_buffers(device: torch.device, tiles: int, split: int, tile_elems: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(workspace fp32, lock counters int32) for splitk_epilogue. The counters persist per device and
    are always left at zero by the kernels; one stream at a time may use them."""
    if tiles > MAX_TILES:
        raise CompressError(f"split-K over {tiles} output tiles exceeds {MAX_TILES}; use larger tiles")
    locks = _LOCKS.get(device)
    if locks is None:
        locks = _LOCKS[device] = torch.zeros(MAX_TILES, dtype=torch.int32, device=device)
    ws = torch.empty(max(1, tiles * split * tile_elems) if split > 1 else 1, dtype=torch.float32, device=device)
    return ws, locks


# --------------------------------------------------------------------------------------------------
# Measured tile choices. `compress.bench.kernel_tune --write PATH` times the candidate configs on the GPU
# at M in each bucket and writes {kernel: {bucket: config}}; COMPRESS_KERNEL_CONFIGS=PATH makes the
# launchers use them instead of their built-in tables (the tables in kernels/*.py hold the values
# measured on the H100, so on that GPU the file and the tables agree).
M_BUCKETS = (1, 16, 64, 256)
_TUNED: dict[str, object] = {}


def m_bucket(m: int) -> int:
    """The tuned bucket an M falls in: 1, 2..16, 17..64, 65+."""
    for b in M_BUCKETS:
        if m <= b:
            return b
    return M_BUCKETS[-1]


# What a COMPRESS_KERNEL_CONFIGS entry must hold, by family (the kernel name given to `tuned_config`; "w8a8@<M>" is
# "w8a8") and config "kind" (None: no "kind" key). Each row is the keys its launcher reads as cfg[KEY]; a family
# without a None row reads cfg["kind"] itself, so there the kind is required too. Keys read with cfg.get(...) are
# optional; keys the table does not know are ignored, as the launchers ignore them. Checked when `tuned_config`
# returns an entry (families not listed here are not checked).
_CONFIG_KEYS: dict[str, dict[str | None, tuple[str, ...]]] = {
    "w8a8": {  # kernels/w8a8.py `_launch`
        None: ("BM", "BN", "BK", "num_warps"),  # `_gemm` (`_w8a8_kernel`)
        "gemv": (),  # `_launch_gemv`: BN, BW, num_warps optional (above 16 tokens `_gemm_fallback`'s GEMM tiles)
        "tma": ("BM", "BN", "BK"),  # kernels/w8a8_gemm_tma.py `plan` / `launch`
    },
    "w4a16": {  # kernels/w4a16.py `_launch`
        "dequant": (),  # dequantize + F.linear
        "gemv": ("BN", "num_warps"),  # `_w4a16_gemv_kernel`
        "tc": ("BM", "BN", "num_warps"),  # `_w4a16_tc_kernel`
        "tcx": ("BM", "BN", "num_warps"),  # `_w4a16_tcx_kernel`
        "mma": ("BM", "BN", "num_warps"),  # `_w4a16_mma_kernel` (the launcher's last branch)
    },
    "sparse24-int8": {  # kernels/sparse24.py `_launch` on int8 values
        "tc": ("BM", "BN", "BW", "num_warps"),  # `_launch_tc`
        "prmtw": ("BN", "BW", "num_warps"),  # `_launch_iw` (K % 8 != 0: the "prmt" GEMV)
        "prmt": ("BN", "BW", "num_warps"),  # `_sparse24_gemv_i_kernel` / `_sparse24_gemv_kernel`
        "gemv": ("BN", "BW", "num_warps"),  # `_sparse24_gemv_kernel`
        "mma": ("BM", "BN", "BK", "num_warps"),  # `_sparse24_mma_kernel` (the launcher's last branch)
    },
    "sparse24-fp16": {  # kernels/sparse24.py `_launch` on fp16/bf16 values
        "tc": ("BM", "BN", "BW", "num_warps"),  # `_launch_tc`
        "prmtw": ("BN", "BQ", "num_warps"),  # `_launch_fw`
        "prmt": ("BN", "BW", "num_warps"),  # `_sparse24_gemv_f_kernel`
        "gemv": ("BN", "BW", "num_warps"),  # `_sparse24_gemv_kernel`
        "mma": ("BM", "BN", "BK", "num_warps"),  # `_sparse24_mma_kernel`
    },
    "sparse24-w8a16": {  # kernels/sparse24.py `_launch_w8a16` (K % 8 != 0: densify + F.linear)
        "prmtw": ("BN", "BW", "num_warps"),  # `_launch_w16`
        "tc": ("BM", "BN", "BW", "num_warps"),  # `_launch_tc`
        "dense": (),  # densify + F.linear
    },
}
# Tile, warp and stage sizes: wherever present (required or not) they must be positive ints.
_CONFIG_INT_KEYS = ("BM", "BN", "BK", "BW", "BQ", "NB", "num_warps", "num_stages", "deep")


def check_tuned_entry(kernel: str, bucket: str, cfg, path: str = "COMPRESS_KERNEL_CONFIGS") -> None:
    """Raise CompressError (one line: the file, the entry, the bad key, the fix) unless `cfg` is a config the launcher
    of family `kernel` can run (`_CONFIG_KEYS`). kernel_tune's own candidates all pass
    (tests/test_s17_kernel_configs.py)."""
    family = kernel.split("@", 1)[0]
    kinds = _CONFIG_KEYS.get(family)
    if kinds is None:
        return
    where = f'COMPRESS_KERNEL_CONFIGS={path}: entry "{kernel}" / "{bucket}"'
    fix = "python -m compress.bench.kernel_tune --final --write " + path
    if not isinstance(cfg, dict):
        raise CompressError(f"{where} is {json.dumps(cfg)[:60]}, not a JSON object of config keys; "
                            f"write it as {{\"kind\": ..., \"BN\": ...}} or rewrite the file with {fix}")
    kind = cfg.get("kind")
    known = ", ".join(f'"{k}"' for k in kinds if k is not None)
    if not isinstance(kind, (str, type(None))) or kind not in kinds:
        what = ('lacks "kind"' if "kind" not in cfg
                else f'has "kind": {json.dumps(kind)}, which {family} does not know')
        raise CompressError(f"{where} {what} (one of {known}{' or none' if None in kinds else ''}); "
                            f"fix it or rewrite the file with {fix}")
    where += f' (kind "{kind}")' if kind is not None else ""
    for key in kinds[kind]:
        if key not in cfg:
            raise CompressError(f'{where} lacks "{key}"; add it or rewrite the file with {fix}')
    for key in _CONFIG_INT_KEYS:
        if key in cfg and (type(cfg[key]) is not int or cfg[key] <= 0):
            raise CompressError(f'{where} has "{key}": {json.dumps(cfg[key])}, which must be a positive integer; '
                                f"fix it or rewrite the file with {fix}")


def tuned_config(kernel: str, m: int) -> dict | None:
    path = os.environ.get("COMPRESS_KERNEL_CONFIGS")
    if not path:
        return None
    if _TUNED.get("path") != path:
        try:
            with open(path) as f:
                table = json.load(f)
        except (OSError, ValueError) as e:
            raise CompressError(f"COMPRESS_KERNEL_CONFIGS={path} cannot be read ({e}); unset it or point it at a "
                                "file written by `python -m compress.bench.kernel_tune --write`") from None
        if not isinstance(table, dict):
            raise CompressError(f"COMPRESS_KERNEL_CONFIGS={path} holds {type(table).__name__}, not a JSON object "
                                "{kernel: {M bucket: config}}; rewrite it with "
                                f"python -m compress.bench.kernel_tune --final --write {path}")
        _TUNED.update(path=path, table=table, checked=set())
    bucket = str(m_bucket(m))
    by_bucket = _TUNED["table"].get(kernel)
    if by_bucket is None:
        return None
    if not isinstance(by_bucket, dict):
        raise CompressError(f'COMPRESS_KERNEL_CONFIGS={path}: entry "{kernel}" is {json.dumps(by_bucket)[:60]}, not a '
                            "JSON object {M bucket: config}; rewrite the file with "
                            f"python -m compress.bench.kernel_tune --final --write {path}")
    cfg = by_bucket.get(bucket)
    if cfg is None or cfg == {}:  # no entry (an empty one overrides nothing): the launcher's own table
        return None
    checked = _TUNED["checked"]  # set with the table above
    if (kernel, bucket) not in checked:  # once per entry: this runs on every launch while the variable is set
        check_tuned_entry(kernel, bucket, cfg, path)
        checked.add((kernel, bucket))
    return dict(cfg) if cfg else None
