"""Session 37: the tensor-core W4A16 GEMV (kernels/csrc/w4a16_gemv.cu) of this session against session 36's, same
process, same launch configs (the served plan of each layer shape and token count), rotate timing
(compress.bench.kernel_timing.checked_call_us: each arm checked against kernels.w4a16.w4a16_linear_ref and for the
same bytes on a second call, then timed).

This session's changes to the GEMV, all found in its SASS (sm_90a, nvcc 13.0) on the CPU machine:
- group 128 at <= 16 tokens: no subtraction in the dequantization ("offset + u" into the mma, each block's sums
  start from -(offset x sum(x') + z x sum(x)); dequant_offset in the .cu);
- the activations' staging: 16-byte units stepped from one division a thread (it divided by the runtime 4 M twice a
  unit);
- the weight copies' shared-memory addresses written so the compiler folds them (it rebuilt the swizzle per copy).

Call 2 ran it at 4c90c77 (branch s37-offset-dequant), where the offset dequantization and its -DW4_OFFSET switch
exist; main kept the kernel without it (the "s37 sub" arm's SASS, byte for byte), so on main the two s37 arms build the
same kernel.

Usage (repository root, GPU machine), with session 36's source beside the new one (its includes resolve there):
  git show edb8234:kernels/csrc/w4a16_gemv.cu > kernels/csrc/w4a16_gemv_s36.cu   # on the CPU machine, not committed
  python3 bench/results/h200/kernels_s37/offset_ab.py OUT_JSON
Environment: AB_M (default "1 2 4 8 16"), AB_SHAPES (names, comma-separated), AB_CASES (default "fp16:128:sym";
dtype:group:sym|asym, space-separated), AB_REPEAT (default 2: the arms run in turn twice and each keeps its faster
time). Arms: s36 (session 36's source), "s37 sub" (this session's, built with -DW4_OFFSET=0: the subtracting
dequantization, so only the staging and copy-address changes), s37 (this session's default build).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import cuda_build, w4a16_cuda
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

SHAPES = [("8B q/o", 4096, 4096), ("8B k/v", 1024, 4096), ("8B gate/up", 14336, 4096), ("8B down", 4096, 14336),
          ("70B q/o", 8192, 8192), ("70B k/v", 1024, 8192), ("70B gate/up", 28672, 8192), ("70B down", 8192, 28672),
          ("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096)]
NEW_SRC = w4a16_cuda.SRC
BASE_SRC = NEW_SRC.with_name("w4a16_gemv_s36.cu")
# Arm -> (source, extra nvcc flags): session 36's kernel; this session's without the offset dequantization (the
# staging and copy-address changes alone); this session's as built by default.
ARMS = {"s36": (BASE_SRC, ()), "s37 sub": (NEW_SRC, ("-DW4_OFFSET=0",)), "s37": (NEW_SRC, ())}
# One library cache per arm, swapped in before each call (cuda_build keys the .so by source bytes and flags).
LIBS = {arm: cuda_build.Libraries(w4a16_cuda._bind) for arm in ARMS}
_extra: tuple[str, ...] = ()
_compile_library = cuda_build.compile_library


def _compile_with_extra(src, name, flags, *rest):
    return _compile_library(src, name, [*flags, *_extra], *rest)


cuda_build.compile_library = _compile_with_extra


def use(arm: str) -> None:
    global _extra
    w4a16_cuda.SRC, _extra = ARMS[arm]
    w4a16_cuda._libraries = LIBS[arm]


def main(out_path: str) -> None:
    if not BASE_SRC.exists():
        sys.exit(f"error: {BASE_SRC} missing; write it with git show edb8234:kernels/csrc/w4a16_gemv.cu (see the docstring)")
    ms = [int(m) for m in os.environ.get("AB_M", "1 2 4 8 16").split()]
    only = os.environ.get("AB_SHAPES", "")
    cases = [c.split(":") for c in os.environ.get("AB_CASES", "fp16:128:sym").split()]
    repeat = int(os.environ.get("AB_REPEAT", "2"))
    print(f"{torch.cuda.get_device_name()}; M {ms}; cases {cases}", flush=True)
    rows = []
    for name, n, k in SHAPES:
        if only and name not in only.split(","):
            continue
        for dt, gs, sym in cases:
            dtype = torch.float16 if dt == "fp16" else torch.bfloat16
            p = make_int4(n, k, int(gs), sym == "sym", dtype, "cuda", seed=n + k)
            for m in ms:
                x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k + m)).to(dtype)
                want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], int(gs))
                row = {"shape": name, "N": n, "K": k, "M": m, "case": f"{dt} g{gs} {sym}",
                       "plan": w4a16_cuda.planned(n, k, m, group_size=int(gs), asym=sym != "sym")}
                for i in range(repeat):
                    for arm in ARMS:
                        use(arm)
                        got = kt.checked_call_us(
                            lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], int(gs)), p, want)
                        if arm not in row or got["us"] < row[arm]["us"]:
                            row[arm] = got
                if dt == "fp16" and gs == "128" and sym == "sym":
                    w = torch.randn(n, k, device="cuda", dtype=dtype)
                    row["fp16_us"] = 1000 * kt.call_ms(lambda w: F.linear(x, w), w)
                    del w
                b36, bsub, b37 = row["s36"]["us"], row["s37 sub"]["us"], row["s37"]["us"]
                print(f"{name:17s} {row['case']:15s} M={m:2d} s36 {b36:6.2f} sub {bsub:6.2f} ({100 * (bsub / b36 - 1):+.1f}%) "
                      f"s37 {b37:6.2f} ({100 * (b37 / b36 - 1):+.1f}%) us  err {row['s36']['err']:.0e}/"
                      f"{row['s37 sub']['err']:.0e}/{row['s37']['err']:.0e}  {row['plan']}"
                      + (f"  fp16 {row['fp16_us']:.2f}" if "fp16_us" in row else ""), flush=True)
                rows.append(row)
                Path(out_path).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1,
                                                     default=str))
            del p
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
