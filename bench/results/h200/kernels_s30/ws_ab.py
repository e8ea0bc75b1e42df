"""Session 30: the warp-specialized one-token W4A16 GEMV (kernels/csrc/w4a16_ws_gemv.cu: one producer warp keeping
NS ring stages of TMA bulk copies in flight, consumer warps doing the CUDA-core GEMV's math) against the served
tensor-core GEMV (kernels/w4a16_cuda.py) and the CUDA-core GEMV (kernels/w4a16_cc.py, its served plan), per layer
shape, one process, the kernel table's rotate timing (compress.bench.kernel_timing.checked_call_us: every arm checked
against kernels.w4a16.w4a16_linear_ref and for the same bytes on a second call, then timed).

Usage (repository root, GPU machine):
  python3 bench/results/h200/kernels_s30/ws_ab.py check CONFIG       # one config on small odd shapes, every format
  python3 bench/results/h200/kernels_s30/ws_ab.py time OUT_JSON      # WS_CONFIGS (default all) x the layer shapes
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing as kt
from kernels import cuda_build, w4a16_cc, w4a16_cuda
from kernels.cases import make_int4, rel_err
from kernels.w4a16 import w4a16_linear_ref

SRC = Path(__file__).resolve().parents[4] / "kernels" / "csrc" / "w4a16_ws_gemv.cu"
SHAPES = [("8B q/o", 4096, 4096), ("8B k/v", 1024, 4096), ("8B gate/up", 14336, 4096), ("8B down", 4096, 14336),
          ("70B q/o", 8192, 8192), ("70B k/v", 1024, 8192), ("70B gate/up", 28672, 8192), ("70B down", 8192, 28672),
          ("8B fused qkv", 6144, 4096), ("8B fused gate_up", 28672, 4096)]


def lib(nomath: bool = False) -> ctypes.CDLL:
    flags = ["-DW4WS_NOMATH"] if nomath else []
    so = ctypes.CDLL(str(cuda_build.compile_library(SRC, "ws_nomath" if nomath else "ws", flags,
                                                    cuda_build.arch(torch.device("cuda")), "w4a16 WS GEMV", "-")))
    p, i = ctypes.c_void_p, ctypes.c_int
    so.w4ws_gemv.restype = i
    so.w4ws_gemv.argtypes = [p, i, p, p, p, p, i, i, i, i, i, i, p]
    return so


SO = None


def ws(x, p, gs, config, pdl=2, max_grid=0, so=None):
    global SO
    SO = SO or lib()
    so = so or SO
    n, k = p["qweight"].shape[0], x.shape[-1]
    out = torch.empty(1, n, device=x.device, dtype=x.dtype)
    z = p["zeros"]
    rc = so.w4ws_gemv(x.data_ptr(), int(x.dtype == torch.bfloat16), p["qweight"].data_ptr(), p["scales"].data_ptr(),
                      None if z is None else z.data_ptr(), out.data_ptr(), n, k, gs, config, {0: 0, 1: 1, 2: 3}[pdl],
                      max_grid, torch.cuda.current_stream().cuda_stream)
    if rc:
        raise RuntimeError(f"w4ws_gemv rc {rc}")
    return out


def describe(c: int) -> str:
    SO_ = SO or lib()
    f = [SO_.w4ws_config(c, i) for i in range(4)]
    return f"ws tc c{f[0]}u{f[2]}s{f[3]}" if f[1] == 16 else f"ws c{f[0]}r{f[1]}u{f[2]}s{f[3]}"


def check(config: int) -> None:
    bad = 0
    for n, k in ((64, 512), (40, 200), (8, 4096), (136, 1000), (1024, 4160), (4096, 14336)):
        for gs, sym, dt in ((128, True, torch.float16), (64, True, torch.float16), (128, False, torch.float16),
                            (64, False, torch.bfloat16), (128, True, torch.bfloat16)):
            p = make_int4(n, k, gs, sym, dt, "cuda", seed=n + k + gs)
            x = torch.randn(1, k, device="cuda", dtype=dt)
            want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs)
            for pdl in (2, 0):
                got = ws(x, p, gs, config, pdl)
                torch.cuda.synchronize()
                e = rel_err(got, want)
                tol = 2e-3 if dt == torch.float16 else 1e-2
                same = torch.equal(got, ws(x, p, gs, config, pdl))
                ok = e < tol and same
                bad += not ok
                if not ok:
                    print(f"  FAIL config {config} N={n} K={k} g{gs} {'sym' if sym else 'asym'} {dt} pdl{pdl}: "
                          f"err {e:.2e} same {same}", flush=True)
    print(f"check config {config} ({describe(config)}): {'PASS' if not bad else f'{bad} FAILED'}", flush=True)
    sys.exit(1 if bad else 0)


def time_all(out_path: str) -> None:
    configs = [int(c) for c in os.environ.get("WS_CONFIGS", "").split()] or list(range(lib().w4ws_num_configs()))
    grids = [int(g) for g in os.environ.get("WS_GRIDS", "0").split()]
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}; configs {configs}", flush=True)
    rows = []
    for name, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        x = torch.randn(1, k, device="cuda", generator=torch.Generator("cuda").manual_seed(k)).half()
        want = w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], 128)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        fp16 = 1000 * kt.call_ms(lambda w: F.linear(x, w), w)
        served = kt.checked_call_us(lambda p: w4a16_cuda.w4a16_gemv(x, p["qweight"], p["scales"], p["zeros"], 128), p, want)
        cc = kt.checked_call_us(lambda p: w4a16_cc._launch(x, p["qweight"], p["scales"], p["zeros"], 128), p, want)
        row = {"shape": name, "N": n, "K": k, "fp16_us": fp16, "served": served, "served_plan": w4a16_cuda.planned(n, k, 1),
               "cc": cc, "cc_plan": w4a16_cc.planned(n, k, dev), "ws": {}}
        for c in configs:
            for g in grids:
                row["ws"][f"{describe(c)} grid{g}"] = kt.checked_call_us(lambda p: ws(x, p, 128, c, 2, g), p, want)
        best = min(row["ws"], key=lambda a: row["ws"][a]["us"])
        print(f"{name:18s} fp16 {fp16:7.2f}  served {served['us']:7.2f} ({row['served_plan']})  cc {cc['us']:7.2f}  "
              f"ws best {row['ws'][best]['us']:7.2f} ({best})", flush=True)
        print("    " + "  ".join(f"{a.replace('ws ', '')} {r['us']:.2f}" for a, r in row["ws"].items()), flush=True)
        rows.append(row)
        del p, w
        torch.cuda.empty_cache()
        with open(out_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1, default=str)


def diag() -> None:
    """The ring alone: a build whose consumers only read their weight words (-DW4WS_NOMATH; wrong outputs, timed
    unchecked) against the real kernel, same configs, same shapes: what the math costs."""
    nm = lib(nomath=True)
    configs = [int(c) for c in os.environ.get("WS_DIAG_CONFIGS", "0 5").split()]
    for name, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        x = torch.randn(1, k, device="cuda").half()
        cells = []
        for c in configs:
            full = 1000 * kt.call_ms(lambda p: ws(x, p, 128, c), p)
            ring = 1000 * kt.call_ms(lambda p: ws(x, p, 128, c, so=nm), p)
            cells.append(f"{describe(c)}: {full:.2f} / ring alone {ring:.2f}")
        print(f"{name:18s} " + "   ".join(cells), flush=True)
        del p
        torch.cuda.empty_cache()


if __name__ == "__main__":
    {"check": lambda: check(int(sys.argv[2])), "time": lambda: time_all(sys.argv[2]), "diag": diag}[sys.argv[1]]()
