"""CUDA C++ W4A16 decode GEMV (kernels/csrc/w4a16_gemv.cu) for M = 1..64 tokens over the compress.int4 layout:
built with nvcc on first use (kernels/cuda_build.py), loaded through ctypes, launched on torch's current stream.

Why not Triton: the Triton W4A16 kernels (kernels/w4a16.py) stream the int4 weights at 1.0-1.5 TB/s on the
Llama-3-8B layers (bench/results/h100/kernels/NOTES.md), about half the copy bandwidth. The CUDA kernel streams
each warp's rows through a ring of shared-memory slots filled by cp.async (several slots in flight per warp),
dequantizes a word (8 weights) in 9 instructions (group 128) straight into tensor-core fragments, and runs the
mma twice per fragment for M = 9..16 (the .cu header has the layout and the instruction count).
Measured on the H100: bench/results/h100/kernels/w4a16_cuda_s4_notes.md (and w4a16_cuda_notes.md, session 3).

Covered: M = 1..64 (17..64 since session 8: 4 or 8 token tiles, weights scaled before the mma; variants with two
16-row tiles per warp, `ROW_TILES`; the balanced schedule and the fused input transforms stay at <= 16 tokens),
group 64 / 128, symmetric and asymmetric, fp16 or bf16 activations with scales of the same dtype (the runtime keeps
them so), the checkpoint's packed tensors as they are. Anything else raises `CompressError` from `w4a16_gemv`;
`supports` answers without raising (the runtime's path choice asks it).
COMPRESS_W4A16_CUDA=0 turns the kernel off; COMPRESS_W4A16_VARIANT forces a build variant;
COMPRESS_W4A16_CLUSTER=1 / 0 forces split K reduced inside thread-block clusters / through the workspace (see the
.cu header); COMPRESS_W4A16_BALANCE=1 / 0 forces the balanced schedule on (where its plan exists) / off (the
per-row-group split of session 4) for every shape; COMPRESS_W4A16_PICKS=FILE.json takes (variant, waves,
cluster, balanced) per shape and M bucket from a sweep's output ({"N,K": {"8": [...], "16": [...]}}; keys "1"
and "4" serve one and 2..4 tokens ahead of "8") before the tables below (bench/results/h100/kernels_s6/ab.py
writes one); COMPRESS_W4A16_PDL picks plain launches (0),
programmatic dependent launch (1) or, the default, the same with the weights read before the previous kernel is done (2: the weights must not be written by the kernel
launched right before the GEMV; see the .cu header).

Public: `w4a16_gemv` (launcher, registered as torch.ops.compress.w4a16_gemv), `supports`, `plan`, `build`;
`w4a16_gemv_silu_mul` / `w4a16_gemv_rms_norm` (session 7: the decode step's silu * up, or residual add + RMSNorm,
done by the GEMV while it stages its activations, from a separate -DW4_XFORM=1 build; measured slower end to end on
the H100, so the runtime offers them only when asked: COMPRESS_DECODE_W4_FUSE, bench/results/h100/e2e/session7/).
The plain-torch reference of the same math is kernels.w4a16.w4a16_linear_ref.
"""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from pathlib import Path

import torch

from compress.errors import CompressError
from compress.packing.int4 import BLOCK_K, GROUP_SIZES, num_groups, padded_k
from kernels import cuda_build
from kernels.op_dispatch import direct_call, on_input_device

SRC = Path(__file__).resolve().parent / "csrc" / "w4a16_gemv.cu"
MAX_M = 64  # eight mma n-tiles of 8 tokens (session 8; 16 before)
DECODE_MAX_M = 16  # the balanced schedule and the fused input transforms stop here
# Build variants: name -> (warps per CTA, 128-k blocks per ring slot, ring slots per warp). A CTA owns 16 rows per
# warp; a warp's ring holds slots x blocks x 1 KB of weights, slots - 1 of them in flight. A CTA stages the
# activations of its K chunk: 4M/rows bytes of them per weight byte, so larger M wants more rows (warps) per CTA.
# w16b2s3 / w8b2s4: session 6 (one slot deeper, more bytes in flight before the dependency wait).
VARIANTS = {"w4b2s4": (4, 2, 4), "w4b4s3": (4, 4, 3), "w4b8s2": (4, 8, 2), "w4b1s8": (4, 1, 8), "w8b2s3": (8, 2, 3),
            "w2b2s6": (2, 2, 6), "w16b2s2": (16, 2, 2), "w16b2s3": (16, 2, 3), "w8b2s4": (8, 2, 4),
            "w4b2s3r2": (4, 2, 3), "w4b2s4r2": (4, 2, 4), "w8b2s2r2": (8, 2, 2), "w8b2s3r2": (8, 2, 3),
            "w16b4s2": (16, 4, 2)}
# Session 8: 16-row mma tiles per warp (-DW4_RT); 2 = a warp owns 32 rows and each B fragment (activations) read from
# shared memory feeds two weight tiles, halving that traffic per weight byte, which grows with the token tiles.
ROW_TILES = {"w4b2s3r2": 2, "w4b2s4r2": 2, "w8b2s2r2": 2, "w8b2s3r2": 2}
# Session 25: warps sharing one row tile (-DW4_KS; the .cu header), each taking every KS-th ring slot of the K chunk,
# so a CTA reads KS x blocks x 64 contiguous bytes of a row at a time. The balanced schedule is not built for them.
SHARED_TILE = {"w8b2s3k4": 4, "w8b2s3k8": 8, "w8b2s4k4": 4, "w16b2s2k4": 4, "w16b2s2k8": 8, "w16b2s3k8": 8,
               "w4b2s4k4": 4, "w16b2s2k16": 16, "w16b2s3k4": 4, "w16b4s2k8": 8}
VARIANTS.update({name: VARIANTS[name[:name.index("k")]] for name in SHARED_TILE})


def rows_per_cta(name: str) -> int:
    """Output rows of one CTA of a build variant: 16 per mma row tile, ROW_TILES tiles per warp, SHARED_TILE warps
    per tile."""
    return 16 * VARIANTS[name][0] * ROW_TILES.get(name, 1) // SHARED_TILE.get(name, 1)


# (variant, waves) per M bucket (M <= 8, <= 16, <= 32, <= 64); waves = CTAs launched / CTAs resident at once (see
# `plan`).
# Evidence (H100, bench/results/h100/kernels/w4a16_cuda_s4.md): the best geometric mean over 12 Llama-3 / Qwen3
# layer shapes at M = 1 (w8b2s3 waves 0.5: 16.2 us, the first default w4b2s4 waves 1: 17.2) and at M = 16
# (w16b2s2 waves 1: 29.9 us; the 4-warp variants 40-49 us).
# M = 17..32 / 33..64 (session 8, call 1, 8B q/o, one process): w16b2s2 waves 1 17.7 / 30.6 us; the two-row-tile
# builds 24.0-45.9 / 43.4-124 us (bench/results/h100/kernels_s8_w4a16/README.md).
DEFAULTS = {8: ("w8b2s3", 0.5), 16: ("w16b2s2", 1.0), 32: ("w16b2s2", 1.0), 64: ("w16b2s2", 1.0)}
DEFAULT_VARIANT = "w8b2s3"  # the one the tests build first
# Measured winners per layer shape, same run: (N, K) -> {M bucket: (variant, waves, cluster reduction)}. The
# variant and waves are the fastest plain launch at M = 1 (bucket 8) or M = 16 (bucket 16); cluster where the
# cluster reduction (with programmatic dependent launch) beat the workspace one by more than 2%. M = 2..8 and
# 9..15 take the M = 1 / M = 16 winners unmeasured (correctness is tested for them).
# Session 8 (bench/results/h100/kernels_s8_w4a16/README.md, call 2, one process, the pick timed a second time): bucket
# 16 where a two-row-tile build with the cluster reduction beat the session-6 winner by > 2% (us, new vs old),
# buckets 32 (M = 17..32) and 64 (33..64) where a candidate beat DEFAULTS' w16b2s2 waves 1 by > 2%.
# Session 9 (bench/results/h100/e2e/session9/README.md): bucket 8 of the 8B fused qkv and of the 8B down chosen inside
# the Llama-3-8B W4A16 batch-1 decode step (CUDA graph, programmatic dependent launch; TPOT, one process) instead of
# by single calls: there a cluster launch cannot start early beside the kernel ahead of it (o_proj with the cluster
# reduction 2.413 -> 2.578 ms, down 2.377 -> 2.637), and the down projection with 16 warps and a third ring slot won
# (2.413 / 2.424 -> 2.377 / 2.381 ms), qkv without the cluster reduction after it (2.373 / 2.381 -> 2.362 ms).
# Session 25 (bench/results/h100/kernels_s25/README.md): bucket 8 (and 70B k/v at 16 and 32) on the shared-tile builds
# where kernels_s25/sweep.py's rotate timing (one process, first timings) beat the served config by > 2% without the
# cluster reduction; the 8B decode step's three (fused qkv, o, down) confirmed in the step (ab_decode.py, call 3:
# 2.363 / 2.368 -> 2.298 ms), where w16b4s2k8 for down (faster alone) was not faster.
TUNED = {
    # 8B / Qwen3-8B fused qkv: 8 8.42 -> 7.27 us (w16b2s2k4)
    (6144, 4096): {8: ("w16b2s2k4", 1.0, False), 16: ("w16b2s2", 0.5, True)},
    # 8B q / o: 8 6.88 -> 5.68 us (w16b2s2k8)
    (4096, 4096): {8: ("w16b2s2k8", 1.0, False), 16: ("w16b2s2", 1.0, False)},
    (28672, 4096): {8: ("w16b2s2", 1.0, False), 16: ("w16b2s2", 0.5, False)},  # 8B fused gate_up
    # 8B down: 8 14.37 -> 13.60 us (w16b2s2k8); 16 22.34 -> 20.42 us; 32 41.84 -> 31.95
    (4096, 14336): {8: ("w16b2s2k8", 1.0, False), 16: ("w8b2s2r2", 1.0, True), 32: ("w16b2s2", 2.0, False)},
    # 8B k / v: 8 4.05 -> 3.53 (w16b2s2k16); 16 7.09 -> 6.40; 32 10.30 -> 7.72; 64 17.19 -> 12.33
    (1024, 4096): {8: ("w16b2s2k16", 0.5, False), 16: ("w4b2s3r2", 1.0, True), 32: ("w8b2s3", 1.0, True),
                   64: ("w8b2s3", 1.0, True)},
    # 8B gate / up. M <= 8: session 6's w8b2s4 (a ring slot deeper), 14.43 / 14.29 -> 13.55 us in one process
    # (bench/results/h100/kernels_s6/README.md). Session 8: 16 23.40 -> 18.09; 32 35.28 -> 31.56.
    (14336, 4096): {8: ("w8b2s4", 0.5, False), 16: ("w8b2s2r2", 1.0, True), 32: ("w16b2s2", 2.0, False)},
    # 70B q / o: 32 40.79 -> 32.70. M <= 8, session 9 (bench/results/h100/e2e/session9/m1_sweep.log, rotate, one
    # process, second timings): w8b2s4 15.58 us vs w8b2s3 15.81 (fp16 46.93): 2.970x -> 3.012x. Session 25: 8 15.55 ->
    # 14.43 (w16b2s2k4).
    (8192, 8192): {8: ("w16b2s2k4", 1.0, False), 16: ("w16b2s2", 0.5, False), 32: ("w16b2s2", 2.0, False)},
    # 70B k / v: 16 10.22 -> 9.92; 32 14.95 -> 12.30; 64 25.45 -> 17.66. Session 25: 8 6.01 -> 4.87 (w16b2s2k16);
    # 16 9.79 -> 7.78 (w16b2s3k4); 32 12.31 -> 10.12 (w16b2s2k4)
    (1024, 8192): {8: ("w16b2s2k16", 0.5, False), 16: ("w16b2s3k4", 0.5, False), 32: ("w16b2s2k4", 1.0, False),
                   64: ("w8b2s3", 1.0, False)},
    # 70B gate / up: 8 49.24 -> 47.05 (w8b2s3k4); 16 73.04 -> 68.51; 32 104.09 -> 101.85
    (28672, 8192): {8: ("w8b2s3k4", 0.5, False), 16: ("w8b2s2r2", 1.0, True), 32: ("w16b2s2", 2.0, False)},
    # 70B down: 16 78.33 -> 67.46; 32 107.80 -> 105.20
    (8192, 28672): {8: ("w8b2s3", 2.0, False), 16: ("w8b2s2r2", 1.0, True), 32: ("w16b2s2", 2.0, False)},
    (24576, 4096): {8: ("w4b4s3", 0.5, False), 16: ("w16b2s2", 0.5, False)},  # Qwen3-8B fused gate_up
    (4096, 12288): {8: ("w8b2s3", 1.0, False), 16: ("w16b2s2", 2.0, False)},  # Qwen3-8B down
}
# Measured winners on GPUs other than the H100 TUNED was measured on, ahead of TUNED and BALANCED on a GPU whose name
# (torch.cuda.get_device_name) holds the key; the form of a picks file: (N, K) -> {M bucket: (variant, waves, cluster
# reduction, balanced schedule)}. Keys 1 and 4 (any table, session 37) serve one token and 2..4 tokens, ahead of
# bucket 8.
# H200 (session 27, bench/results/h200/kernels_s27/README.md): the same SMs as the H100 and ~1.4x its copy bandwidth.
# Call 1 ran kernels_s25/sweep.py over every build (waves 0.5 / 1 / 2; the cluster reduction on and off at 16 tokens)
# at 1 and 16 tokens, rotate timing, one process; an entry is its fastest arm where that beat TUNED's config by more
# than 2% at both of its timings (us, TUNED's -> this). In call 4 (another machine, the plain arms of tiled_ab.py)
# every entry was again faster than TUNED's config and within 1.5% of that run's fastest arm. Qwen3 down at 16 tokens
# comes from call 4 alone (call 1's sweep stopped before it). At one token TUNED's configs held on the other 8 shapes
# (within 2%), and in the 8B decode step the balanced schedule lost on every layer (call 3: 1.916 -> 2.07-2.43 ms).
# M = 2..8 and 9..15 take these entries unmeasured, as they take TUNED's. Session 28 (kernels_s28/README.md) added Qwen3
# down at one token, measured the same way with that session's builds.
# Session 37 (bench/results/h200/kernels_s37/README.md, call 4): this session's kernel (the faster staging) re-tuned at
# 16 and 8 tokens with kernels_s25/sweep.py (14 builds x waves 0.5 / 1 x cluster off / on, rotate timing, one process;
# an entry where an arm beat the served config by more than 2% at both its timings; us, served -> this). Bucket 8 had
# come from one-token sweeps and served 2..8 tokens unmeasured: at 8 tokens the fastest arms were 11-65% faster (8B
# down 36.51 -> 13.49 us). Those one-token configs stay, under key 1 (one token only). Key 4 (2..4 tokens): the
# one-token config where it was faster than the 8-token one in the W4A16 tables of calls 3 and 5 (the two configs'
# CUDA GEMV column at 2 and 4 tokens, summed; two machines), and on the fused shapes, which the table lacks.
TUNED_BY_GPU: dict[str, dict[tuple[int, int], dict[int, tuple[str, float, bool, bool]]]] = {
    "H200": {
        # 8B gate / up: 1 12.06 -> 11.42 (session 27); 8 13.84 -> 12.30 (session 37)
        (14336, 4096): {1: ("w16b2s2", 1.0, False, False), 4: ("w16b2s2", 1.0, False, False),
                        8: ("w16b2s2", 0.5, True, False)},
        # 70B q / o: 16 22.48 -> 18.99 (session 27); 8 25.16 -> 15.99 (37)
        (8192, 8192): {1: ("w16b2s2k4", 1.0, False, False), 8: ("w8b2s2r2", 1.0, False, False),
                       16: ("w8b2s2r2", 1.0, False, False)},
        # 8B k / v: 16 5.96 -> 5.07 (27); 8 5.06 -> 3.97 (37)
        (1024, 4096): {1: ("w16b2s2k16", 0.5, False, False), 4: ("w16b2s2k16", 0.5, False, False),
                       8: ("w4b2s3r2", 1.0, True, False), 16: ("w8b2s4", 0.5, True, False)},
        # 70B gate / up: 1 37.54 -> 36.78; 16 66.76 -> 60.76 (27); 8 52.10 -> 44.47 (37)
        (28672, 8192): {1: ("w16b2s2", 1.0, False, False), 4: ("w16b2s2", 1.0, False, False),
                        8: ("w8b2s2r2", 0.5, True, False), 16: ("w8b2s2r2", 0.5, False, False)},
        # 70B down: 1 37.84 -> 36.20 (27); 8 53.79 -> 50.05 (37)
        (8192, 28672): {1: ("w8b2s2r2", 1.0, False, False), 4: ("w8b2s2r2", 1.0, False, False),
                        8: ("w8b2s3", 0.5, False, False)},
        # 8B fused qkv: 16 10.98 -> 10.59 (27); 8 11.90 -> 8.00 (37)
        (6144, 4096): {1: ("w16b2s2k4", 1.0, False, False), 4: ("w16b2s2k4", 1.0, False, False),
                       8: ("w8b2s3", 0.5, True, False), 16: ("w8b2s2r2", 2.0, True, False)},
        # 8B fused gate_up: 16 39.89 (balanced) -> 35.09 (27); 8 25.93 -> 20.98 (37)
        (28672, 4096): {1: ("w16b2s2", 1.0, False, False), 4: ("w16b2s2", 1.0, False, False),
                        8: ("w8b2s2r2", 1.0, True, False), 16: ("w8b2s2r2", 2.0, False, False)},
        # 8B q / o: 8 10.83 -> 6.51; 16 8.34 -> 7.64 (37)
        (4096, 4096): {1: ("w16b2s2k8", 1.0, False, False), 4: ("w16b2s2k8", 1.0, False, False),
                       8: ("w16b2s2k4", 0.5, True, False), 16: ("w8b2s3", 0.5, False, False)},
        # 8B down: 8 36.51 -> 13.49 (37)
        (4096, 14336): {1: ("w16b2s2k8", 1.0, False, False), 8: ("w16b2s2", 1.0, False, False)},
        # 70B k / v: 8 9.67 -> 5.23; 16 6.47 -> 6.21 (37)
        (1024, 8192): {1: ("w16b2s2k16", 0.5, False, False), 8: ("w16b2s3k4", 1.0, False, False),
                       16: ("w8b2s3", 0.5, True, False)},
        # Qwen3-8B fused gate_up: 8 17.76 -> 17.11; 16 31.96 -> 27.55 (27; bucket 8 measured at one token)
        (24576, 4096): {8: ("w4b2s4", 1.0, False, False), 16: ("w8b2s2r2", 0.5, False, False)},
        # Qwen3-8B down: 16 20.02 -> 17.66 (call 4); 8 (session 28, calls 4 and 8 on two machines, builds with the
        # one-token accumulator sets) w8b2s3 10.43 / 10.41 -> 10.04 / 10.01 (at one token)
        (4096, 12288): {8: ("w16b2s2k8", 1.0, False, False), 16: ("w8b2s2r2", 1.0, False, False)},
    },
}
# Split-K plan (see `plan`): no K chunk shorter than MIN_BLOCKS blocks of 128; staged activations at most
# STAGED_BYTES per CTA; a CTA's shared memory at most SMEM_BYTES (the H100 allows 227 KB).
MIN_BLOCKS = 2
STAGED_BYTES = 32 * 1024
# Beyond 16 tokens (session 8) a block's activations take 4 KB per 16 tokens: at 32 KB the K chunk would shrink to
# 2 blocks at M = 64 and the split (with its fp32 partials of M x N per chunk) grow; 96 KB keeps 6 blocks there.
STAGED_BYTES_WIDE = 96 * 1024
SMEM_BYTES = 200 * 1024
# COMPRESS_W4A16_PDL when unset: 2 = programmatic dependent launch with the weights read before the wait. Same run:
# 0.03-2.0 us less per call than plain launches on all 12 shapes at M = 1, 2.00 -> 1.89 ms for the 128 GEMVs of a
# Llama-3-8B token back to back (mode 1, no early reads: about no gain per token). It asks that the kernel launched right before a GEMV does not write
# its weights (the .cu header): true of a model's weights and of every caller here; COMPRESS_W4A16_PDL=1 or 0
# where that does not hold.
PDL_DEFAULT = 2
MAX_CLUSTER = 8  # the .cu's portable cluster size: more K chunks reduce through the workspace
# Balanced schedule (the .cu header, flag bit 3), per shape and M bucket: (variant, waves). The per-row-group split
# launches ceil(N / rows) x S CTAs, which rarely fills the SMs evenly (8B gate_up with w16b2s2: 112 CTAs, one per
# SM, 20 of 132 SMs idle); the balanced one launches sms x round(ctas_per_sm x waves) CTAs and cuts the
# (row group, k block) units evenly between them. Shapes listed here take it by default (measured faster).
# Session 6 (bench/results/h100/kernels_s6/README.md): at M = 1 it lost on every shape measured (the per-row-group
# split leaves SMs free, where programmatic dependent launch starts the next call early); at M = 16 it won on
# the fused gate_up, 47.7 -> 42.3 us.
BALANCED: dict[tuple[int, int], dict[int, tuple[str, float]]] = {
    (28672, 4096): {16: ("w16b2s2", 1.0)},  # 8B fused gate_up
}
_RC = {-1: "M outside 1..64", -2: "group_size not 64/128", -3: "bad split-K plan",
       -4: "shared memory over the device's per-block limit", -5: "fused input not aligned or K not a multiple of 8",
       -6: "a fused input transform with more than 16 tokens"}
# Input transforms of `_launch` (the .cu's Args.xform): the decode step's glue folded into the GEMV's activation staging.
XFORM = {None: 0, "silu_mul": 1, "rms_norm": 2}

_warned: list[bool] = []
_workspace = cuda_build.SplitKWorkspace()


def enabled() -> bool:
    return os.environ.get("COMPRESS_W4A16_CUDA", "1") != "0"


def pdl_mode() -> int:
    """COMPRESS_W4A16_PDL: 0 plain launches, 1 programmatic dependent launch, 2 the same with the weights read
    before the previous kernel is done (only where no kernel writes the weights right before the GEMV)."""
    v = os.environ.get("COMPRESS_W4A16_PDL", str(PDL_DEFAULT))
    if v not in ("0", "1", "2"):
        raise CompressError(f"COMPRESS_W4A16_PDL={v!r} is not 0, 1 or 2; unset it or pick one")
    return int(v)


def _env_switch(name: str) -> bool | None:
    """An on/off environment override: "1" -> True, "0" -> False, unset -> None (the tuned tables decide)."""
    v = os.environ.get(name)
    if v is None:
        return None
    if v not in ("0", "1"):
        raise CompressError(f"{name}={v!r} is not 0 or 1; unset it or pick one")
    return v == "1"


def cluster_mode() -> bool | None:
    """COMPRESS_W4A16_CLUSTER=1 / 0: split-K CTAs of a row group reduce inside a thread-block cluster (<= 8 chunks)
    / through the workspace for every shape; unset: as TUNED says (workspace for shapes it does not list)."""
    return _env_switch("COMPRESS_W4A16_CLUSTER")


def balance_mode() -> bool | None:
    """COMPRESS_W4A16_BALANCE=1 / 0: the balanced schedule for every shape (where its plan exists) / for none;
    unset: as BALANCED says."""
    return _env_switch("COMPRESS_W4A16_BALANCE")


_picks_cache: dict[str, dict] = {}


def picks_file() -> dict:
    """COMPRESS_W4A16_PICKS: {(N, K): {bucket: (variant, waves, cluster, balanced)}} from a JSON file, else {}."""
    path = os.environ.get("COMPRESS_W4A16_PICKS")
    if not path:
        return {}
    if path not in _picks_cache:
        import json

        try:
            raw = json.loads(Path(path).read_text())
            got = {tuple(int(v) for v in nk.split(",")): {int(b): (str(c[0]), float(c[1]), bool(c[2]), bool(c[3]))
                                                          for b, c in by.items()} for nk, by in raw.items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError) as e:
            raise CompressError(f"COMPRESS_W4A16_PICKS={path!r} is not a readable picks file ({e}); "
                                'write {"N,K": {"8": [variant, waves, cluster, balanced]}} or unset it') from None
        bad = sorted({c[0] for by in got.values() for c in by.values()} - set(VARIANTS))
        if bad:
            raise CompressError(f"COMPRESS_W4A16_PICKS={path!r} names unknown variants {bad}; use {sorted(VARIANTS)}")
        _picks_cache[path] = got
    return _picks_cache[path]


_gpu_names: dict[int, str] = {}


def gpu_name(device: torch.device | None) -> str | None:
    """The name of the GPU of `device` (cached per device index: the launcher asks on every call), None off CUDA."""
    if device is None or device.type != "cuda":
        return None
    index = device.index
    if index is None:  # "cuda" without an index: the current device, where there is one
        if not torch.cuda.is_available():
            return None
        index = torch.cuda.current_device()
    name = _gpu_names.get(index)
    if name is None:
        name = _gpu_names[index] = torch.cuda.get_device_name(index)
    return name


def _gpu_key(gpu: str | None) -> str | None:
    """The first TUNED_BY_GPU key that the GPU name holds ("H200" in "NVIDIA H200"), else None."""
    return cuda_build.gpu_key(TUNED_BY_GPU, gpu)


def gpu_table(gpu: str | None) -> dict[tuple[int, int], dict[int, tuple[str, float, bool, bool]]]:
    """TUNED_BY_GPU's table for a GPU name (the first key the name holds), else {}."""
    key = _gpu_key(gpu)
    return TUNED_BY_GPU[key] if key is not None else {}


def config_source(gpu: str | None) -> str:
    """Where the launch configs served on the GPU named `gpu` were measured, in words (for benchmark reports)."""
    key = _gpu_key(gpu)
    if key is not None:
        text = (f"measured on the {key} (kernels/w4a16_cuda.py TUNED_BY_GPU[{key!r}]) where it lists the shape and M, "
                "else on the H100 (TUNED)")
    else:
        text = "measured on the H100 (kernels/w4a16_cuda.py TUNED), not on this GPU"
    picks = os.environ.get("COMPRESS_W4A16_PICKS")
    return f"the picks file {picks} (COMPRESS_W4A16_PICKS) where it lists the shape and M, else {text}" if picks else text


def default_config(m: int, n: int | None = None, k: int | None = None,
                   gpu: str | None = None) -> tuple[str, float, bool, bool]:
    """(variant, waves, cluster reduction, balanced schedule) for M tokens of an (N, K) layer on the GPU named `gpu`
    (`gpu_name`): the picks file's entry (COMPRESS_W4A16_PICKS), else that GPU's TUNED_BY_GPU entry, else BALANCED's
    entry for the shape, else TUNED's measured winner, else DEFAULTS. COMPRESS_W4A16_BALANCE=1 / 0 turns the balanced
    schedule on / off for every shape with the variant and waves of the tables (BALANCED's entries go when 0);
    COMPRESS_W4A16_VARIANT overrides the variant for every M and shape."""
    bucket = next((b for b in sorted(DEFAULTS) if m <= b), max(DEFAULTS))
    # A table's key 1 (one token) or 4 (2..4 tokens) comes before its bucket 8 (session 37).
    keys = (1, bucket) if m == 1 else (4, bucket) if m <= 4 else (bucket,)
    entry = lambda table: next((table[b] for b in keys if b in table), None)  # noqa: E731
    bal_env = balance_mode()
    got = entry(BALANCED.get((n, k), {}))
    picked = entry(picks_file().get((n, k), {}))
    on_gpu = entry(gpu_table(gpu).get((n, k), {}))
    if picked is not None:
        name, waves, cluster, balanced = picked
    elif on_gpu is not None:
        name, waves, cluster, balanced = on_gpu
        balanced = balanced if bal_env is None else bal_env
    elif got is not None and bal_env is not False:
        name, waves, cluster, balanced = *got, False, True
    else:
        name, waves, cluster = entry(TUNED.get((n, k), {})) or (*DEFAULTS[bucket], False)
        balanced = bool(bal_env)
    env = os.environ.get("COMPRESS_W4A16_VARIANT")
    if env is not None:
        if env not in VARIANTS:
            raise CompressError(f"COMPRESS_W4A16_VARIANT={env!r} is not one of {sorted(VARIANTS)}; unset it or pick one")
        name = env
    return name, waves, cluster, balanced


def compile_variant(arch_code: str, name: str, xform: bool = False) -> Path:
    """Build (or find cached) the library of one variant for an architecture code such as "90a". xform: the build with
    the fused input transforms (-DW4_XFORM=1, a library of its own; without it the kernels are session 6's)."""
    warps, blocks, slots = VARIANTS[name]
    flags = [f"-DW4_WARPS={warps}", f"-DW4_SB={blocks}", f"-DW4_STAGES={slots}"] + (["-DW4_XFORM=1"] if xform else [])
    if ROW_TILES.get(name, 1) > 1:  # only then: the session-6 variants keep their flags (and cached builds)
        flags.append(f"-DW4_RT={ROW_TILES[name]}")
    if SHARED_TILE.get(name, 1) > 1:
        flags.append(f"-DW4_KS={SHARED_TILE[name]}")
    return cuda_build.compile_library(SRC, name + ("_xf" if xform else ""), flags, arch_code, "w4a16 CUDA GEMV",
                                      "the Triton kernels serve instead")


def _bind(so: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    so.w4a16_gemv.restype = i
    so.w4a16_gemv.argtypes = [p, i, p, p, p, p, p, p, i, i, i, i, i, i, i, i, p]
    so.w4a16_gemv_x.restype = i
    so.w4a16_gemv_x.argtypes = [p, i, p, p, p, p, p, p, i, i, i, i, i, i, i, i, p, i, p, p, p, ctypes.c_float]
    so.w4a16_gemv_rows_per_cta.restype = i
    so.w4a16_gemv_variant.restype = i
    so.w4a16_gemv_ctas_per_sm.restype = i
    so.w4a16_gemv_ctas_per_sm.argtypes = [i, i, i, i, i, i]


_libraries = cuda_build.Libraries(_bind)


def build(device: torch.device, name: str | None = None, xform: bool = False) -> ctypes.CDLL:
    """Compile (once per source / arch / variant / xform, cached on disk) and load the library."""
    name = name or default_config(1)[0]
    key = (cuda_build.arch(device), name, xform)
    return _libraries.get(key, lambda: compile_variant(key[0], name, xform))


def prebuild(device: torch.device, names: list[str]) -> None:
    """Compile several variants at once (cuda_build.compile_parallel), for the benchmark's sweeps; raises the first
    failure."""
    arch_code = cuda_build.arch(device)
    failed = cuda_build.compile_parallel([functools.partial(compile_variant, arch_code, nm) for nm in names])
    if failed:
        raise failed[0][1]


def smem_bytes(per: int, m: int, name: str, group_size: int = 128, asym: bool = False) -> int:
    """Shared memory of one CTA (the .cu's smem_bytes): weight ring, staged activations, scales, zeros."""
    warps, blocks, slots = VARIANTS[name]
    rows, gpb = rows_per_cta(name), 2 if group_size == 64 else 1
    r16 = lambda v: -(-v // 16) * 16  # noqa: E731
    return (warps * slots * blocks * 1024 * ROW_TILES.get(name, 1) + (per * 16 * m + 1) * 16 + r16(per * gpb * rows * 2)
            + (r16(per * gpb * rows) if asym else 0))


def plan(n: int, k: int, m: int, sms: int, name: str, waves: float = 1.0, ctas_per_sm: int = 4,
         min_blocks: int | None = None, group_size: int = 128, asym: bool = True,
         max_split: int | None = None) -> tuple[int, int]:
    """(per, split): 128-k blocks per CTA and number of K chunks.

    Why split K: at decode sizes one CTA per 16*warps rows leaves SMs idle (N=4096 with 4 warps: 64 CTAs for
    132 SMs), and every SM must keep copies in flight to reach the copy bandwidth. The split aims at `waves` x
    the CTAs resident at once (sms x ctas_per_sm, from the occupancy calculator): waves <= 1 keeps every CTA
    resident from the start (no tail wave). Each extra chunk costs one fp32 partial per output (written and
    read back once), small next to the weights. max_split caps the chunks (a cluster reduction holds <= 8);
    shared memory can still force more.
    """
    min_blocks = MIN_BLOCKS if min_blocks is None else min_blocks
    kblocks = padded_k(k) // BLOCK_K
    groups = -(-n // rows_per_cta(name))
    want = max(1, int(sms * max(1, ctas_per_sm) * waves))
    split = max(1, min(kblocks, want // groups, max_split or kblocks))
    per = -(-kblocks // split)
    per = max(per, min(min_blocks, kblocks))
    per = max(1, min(per, (STAGED_BYTES if m <= DECODE_MAX_M else STAGED_BYTES_WIDE) // (256 * m)))
    while per > 1 and smem_bytes(per, m, name, group_size, asym) > SMEM_BYTES:
        per -= 1
    return per, -(-kblocks // per)


def _check(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
           group_size: int) -> tuple[int, int]:
    """Shapes, dtypes and layout first (so these errors read the same on any device), then the device."""
    what = "w4a16_gemv"
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise CompressError(f"{what}: activations must be float16 or bfloat16, got {x.dtype}; cast x first")
    if group_size not in GROUP_SIZES:
        raise CompressError(f"{what}: group_size={group_size} is not supported; use one of {GROUP_SIZES}")
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    if m > MAX_M:
        raise CompressError(f"{what}: M={m} tokens is more than this GEMV's {MAX_M}; use kernels.w4a16.w4a16_linear "
                            "for larger batches")
    if qweight.dtype != torch.int32 or qweight.dim() != 2 or qweight.shape[1] * 8 != padded_k(k):
        raise CompressError(
            f"{what}: qweight {tuple(qweight.shape)} {qweight.dtype} does not fit in_features={k}; "
            f"expected int32 (N, {padded_k(k) // 8}) from compress.packing.int4.pack_int4"
        )
    n = qweight.shape[0]
    g = num_groups(k, group_size)
    if tuple(scales.shape) != (g, n):
        raise CompressError(f"{what}: scales {tuple(scales.shape)} do not match; expected (G, N) = {(g, n)} "
                            f"for group_size={group_size}")
    if scales.dtype != x.dtype:
        raise CompressError(f"{what}: scales are {scales.dtype} but x is {x.dtype}; cast the scales to the "
                            "activation dtype once at load")
    if zeros is not None and (tuple(zeros.shape) != (g, n) or zeros.dtype != torch.uint8):
        raise CompressError(f"{what}: zeros {tuple(zeros.shape)} {zeros.dtype} do not match; expected uint8 {(g, n)}")
    for name, t in (("qweight", qweight), ("scales", scales), ("zeros", zeros)):
        if t is not None and not t.is_contiguous():
            raise CompressError(f"{what}: {name} is not contiguous; pass {name}.contiguous() (once, at load)")
    if qweight.data_ptr() % 16:
        raise CompressError(f"{what}: qweight is not 16-byte aligned (a view at an offset?); pass qweight.clone()")
    cuda_build.check_cuda_tensors(what, "use kernels.w4a16.w4a16_linear_ref on the CPU", x, qweight, scales, zeros)
    return n, k


def supports(x2: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
             group_size: int) -> bool:
    """True when `w4a16_gemv` can run this call here (the checks of the launcher, and a successful build)."""
    m = x2.numel() // max(1, x2.shape[-1])
    if not enabled() or x2.device.type != "cuda" or not 1 <= m <= MAX_M:
        return False
    try:
        _check(x2, qweight, scales, zeros, group_size)
        build(x2.device, default_config(m, qweight.shape[0], x2.shape[-1], gpu_name(x2.device))[0])
    except CompressError as e:
        if "nvcc" in str(e) and not _warned:  # no compiler or a failed build: the Triton kernels serve, say why once
            warnings.warn(str(e), stacklevel=2)
            _warned.append(True)
        return False
    return True


def plan_balanced(n: int, k: int, m: int, sms: int, name: str, waves: float = 1.0, ctas_per_sm: int = 1,
                  group_size: int = 128, asym: bool = True) -> tuple[int, int] | None:
    """(per, ctas) of the balanced schedule, or None where it does not apply (then `plan`'s split serves).

    ctas = sms x round(ctas_per_sm x waves) (at least sms, so every SM gets the same count), at most the units
    (row groups x 128-k blocks); each CTA takes floor or ceil(units / ctas) consecutive units, row group major.
    It applies when a CTA's run is at most one row group's blocks long (so it spans at most two row groups: the
    kernel's two segments), its shared memory fits SMEM_BYTES, and N x kblocks x 4 fits an int (copy offsets).
    """
    rows = rows_per_cta(name)
    kblocks = padded_k(k) // BLOCK_K
    units = -(-n // rows) * kblocks
    # The .cu builds the balanced schedule for <= 16 tokens and one warp per row tile.
    if n * kblocks * 4 >= 2**31 or m > DECODE_MAX_M or name in SHARED_TILE:
        return None
    ctas = min(units, sms * max(1, round(max(1, ctas_per_sm) * waves)))
    per = -(-units // ctas)
    if per > kblocks or smem_bytes(per, m, name, group_size, asym) > SMEM_BYTES:
        return None
    return per, ctas


def balanced_pieces(n: int, k: int, rows: int, ctas: int) -> list[list[tuple[int, int, int]]]:
    """Per row group, its pieces in K order as (cta, first block, blocks): the .cu's bal_owner / bal_start
    arithmetic written out, for tests and notes."""
    kblocks = padded_k(k) // BLOCK_K
    units = -(-n // rows) * kblocks
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(-(-n // rows))]
    for c in range(ctas):
        s0, s1 = c * units // ctas, (c + 1) * units // ctas
        u = s0
        while u < s1:
            rg, kb = divmod(u, kblocks)
            take = min(s1 - u, kblocks - kb)
            out[rg].append((c, kb, take))
            u += take
    return out


_plans: dict[tuple, tuple[int, int]] = {}


def plan_for(device: torch.device, lib: ctypes.CDLL, name: str, n: int, k: int, m: int, group_size: int, asym: bool,
             bf16: bool, waves: float, min_blocks: int | None = None, cluster: bool = False,
             balanced: bool = False) -> tuple[int, int, bool]:
    """`plan` (or `plan_balanced` when asked and it applies) with the CTAs resident per SM asked of the build's
    occupancy calculator (cached per call shape): (per, split or CTAs, balanced)."""
    key = (device, getattr(lib, "_name", None), name, n, k, m, group_size, asym, bf16, waves, min_blocks, cluster, balanced)
    cap = MAX_CLUSTER if cluster else None
    if key in _plans:
        return _plans[key]
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    got = None
    if balanced:
        occ = lambda per: lib.w4a16_gemv_ctas_per_sm(per, m, group_size, int(asym), int(bf16), 1)  # noqa: E731
        first = plan_balanced(n, k, m, sms, name, waves, max(1, occ(8)), group_size, asym)
        if first is not None:
            bp = plan_balanced(n, k, m, sms, name, waves, max(1, occ(first[0])), group_size, asym)
            if bp is not None:
                got = (*bp, True)
    if got is None:
        occ = lambda per: lib.w4a16_gemv_ctas_per_sm(per, m, group_size, int(asym), int(bf16), 0)  # noqa: E731
        # The occupancy depends on the chunk (its staged activations and scales), the chunk on the occupancy:
        # plan at a guess, then once more at the chunk that gave.
        per, _ = plan(n, k, m, sms, name, waves, max(1, occ(8)), min_blocks, group_size, asym, cap)
        got = (*plan(n, k, m, sms, name, waves, max(1, occ(per)), min_blocks, group_size, asym, cap), False)
    _plans[key] = got
    return got


def _launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
            name: str | None = None, waves: float | None = None, min_blocks: int | None = None,
            pdl: int | None = None, cluster: bool | None = None, balanced: bool | None = None,
            xform: str | None = None, y: torch.Tensor | None = None, norm_w: torch.Tensor | None = None,
            eps: float = 0.0, s_out: torch.Tensor | None = None) -> torch.Tensor:
    """The GEMV on x (M, K); xform "silu_mul": x is (M, 2K) = [gate | up]; "rms_norm": the activations are
    rms_norm(x + y) * norm_w (y may be None), with x + y written into s_out (contiguous like x). A transform runs on
    the -DW4_XFORM=1 build of the variant (`build(..., xform=True)`)."""
    kx = x.shape[-1] // 2 if xform == "silu_mul" else x.shape[-1]
    n, k = _check(x[..., :kx], qweight, scales, zeros, group_size)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).contiguous()  # (M, K), or (M, 2K) for silu_mul
    m = x2.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0:
        return out.reshape(*lead, n)
    dname, dwaves, dcluster, dbal = default_config(m, n, k, gpu_name(x.device))
    if xform is not None and name is None and (dname in ROW_TILES or dname in SHARED_TILE):
        # The fused transforms were measured and GPU-tested on session 7's builds (one row tile a warp): keep them there.
        dname, dwaves = DEFAULTS[next(b for b in sorted(DEFAULTS) if m <= b)]
    name, waves = name or dname, dwaves if waves is None else waves
    pdl = pdl_mode() if pdl is None else int(pdl)
    balanced = dbal if balanced is None else balanced
    if cluster is None:
        env = cluster_mode()
        cluster = dcluster if env is None else env
    lib = build(x.device, name, xform is not None)
    rows = rows_per_cta(name)
    per, split, bal = plan_for(x.device, lib, name, n, k, m, group_size, zeros is not None, x.dtype == torch.bfloat16,
                               waves, min_blocks, cluster, balanced)
    flags = {0: 0, 1: 1, 2: 3}[pdl] | (8 if bal else (4 if cluster else 0))
    need = 2 * split * m * rows if bal else (split * m * n if split > 1 else 0)
    ws, cnt = _workspace.get(x.device, need, -(-n // rows))
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    rc = lib.w4a16_gemv_x(
        x2.data_ptr(), int(x.dtype == torch.bfloat16), qweight.data_ptr(), scales.data_ptr(),
        ptr(zeros), out.data_ptr(), ws.data_ptr(), cnt.data_ptr(), m, n, k,
        x2.stride(0), group_size, per, split, flags, cuda_build.stream_handle(x.device),
        XFORM[xform], ptr(y), ptr(norm_w), ptr(s_out), float(eps))
    if rc != 0:
        raise CompressError(f"w4a16 CUDA GEMV: launch failed with code {rc} ({_RC.get(rc, 'CUDA error')}; M={m}, N={n}, "
                            f"K={k}, group {group_size}, per={per}, split={split}, balanced={bal}, variant {name})")
    return out.reshape(*lead, n)


def _w4a16_gemv_op_impl(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                        group_size: int) -> torch.Tensor:
    return _launch(x, qweight, scales, zeros, group_size)


_w4a16_gemv_op = torch.library.custom_op("compress::w4a16_gemv", _w4a16_gemv_op_impl, mutates_args=())


@_w4a16_gemv_op.register_fake
def _(x, qweight, scales, zeros, group_size):
    return x.new_empty(*x.shape[:-1], qweight.shape[0])


@on_input_device
def w4a16_gemv(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
               group_size: int = 128, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W^T (+ bias), W in the compress.int4 layout, for at most 64 tokens.

    x (..., K) fp16/bf16 with M = prod(...) <= 64; qweight int32 (N, Kp/8); scales (G, N) in x's dtype;
    zeros uint8 (G, N) or None (symmetric, z = 8). Returns (..., N) in x's dtype.
    """
    if direct_call(x, qweight, scales, zeros):  # eager: the launcher itself (kernels.op_dispatch)
        y = _w4a16_gemv_op_impl(x, qweight, scales, zeros, group_size)
    else:
        _check(x, qweight, scales, zeros, group_size)  # here too: the custom op would wrap the error
        y = torch.ops.compress.w4a16_gemv(x, qweight, scales, zeros, group_size)
    return y + bias if bias is not None else y


@on_input_device
def w4a16_gemv_silu_mul(gu: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                        group_size: int = 128) -> torch.Tensor:
    """y = (silu(gate) * up) @ W^T for gu = [gate | up] (..., 2K), <= 16 tokens: the MLP's down projection with the
    elementwise step folded into the activation staging (silu in fp32, rounded once to gu's dtype, as the runtime's
    glue). Reference: `silu_mul_ref` then kernels.w4a16.w4a16_linear_ref."""
    if gu.shape[-1] % 2:
        raise CompressError(f"w4a16_gemv_silu_mul: [gate | up] needs an even last dim, got {tuple(gu.shape)}")
    return _launch(gu, qweight, scales, zeros, group_size, xform="silu_mul")


@on_input_device
def w4a16_gemv_rms_norm(x: torch.Tensor, y: torch.Tensor | None, norm_w: torch.Tensor, eps: float, qweight: torch.Tensor,
                        scales: torch.Tensor, zeros: torch.Tensor | None = None,
                        group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, rms_norm(s) * norm_w @ W^T) with s = x + y (x when y is None) for (..., K) rows of one dtype, <= 16
    tokens: the decode step's residual add + RMSNorm folded into the next projection (K a multiple of 8).
    Reference: `add_rms_norm_ref` then kernels.w4a16.w4a16_linear_ref."""
    k = x.shape[-1]
    if norm_w.shape != (k,) or (y is not None and y.shape != x.shape) or k % 8:
        raise CompressError(f"w4a16_gemv_rms_norm: x {tuple(x.shape)}, y {None if y is None else tuple(y.shape)}, "
                            f"norm weight {tuple(norm_w.shape)} do not fit (same shapes, weight (K,), K % 8 == 0)")
    if len({t.dtype for t in (x, y, norm_w) if t is not None}) != 1:
        raise CompressError("w4a16_gemv_rms_norm: x, y and the norm weight must share one dtype; cast them first")
    x2 = x.reshape(-1, k).contiguous()
    y2 = None if y is None else y.reshape(-1, k).contiguous()
    s = x2 if y2 is None else torch.empty_like(x2)
    out = _launch(x2, qweight, scales, zeros, group_size, xform="rms_norm", y=y2, norm_w=norm_w.contiguous(), eps=eps,
                  s_out=None if y2 is None else s)
    return s.reshape(x.shape), out.reshape(*x.shape[:-1], -1)


def silu_mul_ref(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up in fp32, rounded once to gu's dtype (the fused staging's math)."""
    g, u = gu.float().chunk(2, dim=-1)
    return (torch.nn.functional.silu(g) * u).to(gu.dtype)


def add_rms_norm_ref(x: torch.Tensor, y: torch.Tensor | None, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, h) = (x + y, rms_norm(s) * w) with transformers' rounding points (fastpath.add_rms_norm's math)."""
    s = x if y is None else x + y
    sf = s.float()
    h = (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps)).to(s.dtype)
    return s, (w.float() * h.float()).to(s.dtype)


def planned(n: int, k: int, m: int, name: str | None = None, group_size: int = 128, asym: bool = False) -> str:
    """The default plan as text, for benchmark tables: variant, K chunk and split (on GPU 0)."""
    dev = torch.device("cuda", 0)
    dname, waves, cluster, balanced = default_config(m, n, k, gpu_name(dev))
    name = name or dname
    per, split, bal = plan_for(dev, build(dev, name), name, n, k, m, group_size, asym, False, waves, None, cluster,
                               balanced)
    if bal:
        return f"cuda gemv {name} balanced {split} ctas <= {per} blocks"
    return f"cuda gemv {name} per{per} x{split}" + (" cluster" if cluster and 1 < split <= MAX_CLUSTER else "")
