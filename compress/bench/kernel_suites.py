"""The four suites of `compress bench kernels`: each builds real-shape layers, checks every timed kernel against
its plain-torch reference on every timed shape, then times ours, torch fp16 and the peers that run here, in one
run and by one method (compress.bench.kernel_timing: "rotate" by default, "flush" on request).

W8A8 and 2:4 time what the runtime serves: the paths the runtime's layer class offers for the call's M
(`kernel_paths` of compress.runtime's W8A8 / 2:4 layers: our Triton kernel, the int8 GEMV at one token, torch._int_mm
above 16 tokens, ...), each timed and checked, and `kernel (ms)` is the one the runtime's PathTable picks.

Row dicts carry everything the report prints; bytes are counted explicitly (weights + their metadata
+ activations in + outputs out) so GB/s is comparable across kernels.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any, Callable

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import DEFAULT_METHOD, call_ms
from compress.errors import CompressError
from compress.runtime.paths import family_pick
from kernels.cases import BENCH_M, LLAMA_SHAPES, make_int4, make_sparse24, make_vptq, make_w8a8, vptq_seed_rows

QUICK_M = [1, 16, 64, 256]


# Set by the report (compress.bench.kernels): called with a suite's row list after every new row, so a run cut
# short by its time limit still leaves the rows it measured.
PROGRESS: Callable[[list[dict]], None] | None = None


def _emit(rows: list[dict], row: dict) -> None:
    row.setdefault("unix_time", round(time.time(), 2))  # when the row was measured: to line it up with a clock log
    rows.append(row)
    if PROGRESS is not None:
        PROGRESS(rows)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30)).item())


def _row(name, n, k, m, ours_ms, torch_ms, nbytes, copy_gbs, **extra) -> dict:
    gbs = nbytes / (ours_ms * 1e-3) / 1e9
    return {"layer": name, "N": n, "K": k, "M": m, "kernel_ms": ours_ms, "torch_ms": torch_ms, "ratio": ours_ms / torch_ms,
            "speedup": torch_ms / ours_ms, "gbs": gbs, "pct_copy_bw": 100 * gbs / copy_gbs, **extra}


def _dense(n: int, k: int, dtype=torch.float16) -> torch.Tensor:
    return (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)


def _fp16_ms(x: torch.Tensor, w: torch.Tensor, method: str) -> float:
    return call_ms(lambda w: F.linear(x, w), w, method)


# ----------------------------------------------------------------------------------------------- runtime paths
def runtime_paths(build: Callable[[Any], torch.nn.Module], weights: Any, x: torch.Tensor, want: torch.Tensor | None,
                  method: str, label: Callable[[str], str] = str) -> dict:
    """Every path the runtime's layer (build(weights)) offers for x, checked against `want` and timed (each on
    rotating weight copies under "rotate"), and the path the runtime's PathTable picks for this call.

    Returns {"ms": the pick's time, "path": label(pick), "best_ms", "best_path", "paths": {label: ms},
    "rel_err": worst error of any path (None without want)}."""
    from compress.runtime.paths import PathTable

    layers: dict[int, torch.nn.Module] = {}

    def layer(w):  # one runtime layer per weight copy, built when the graph is captured
        if id(w) not in layers:
            layers[id(w)] = build(w)
        return layers[id(w)]

    first = layer(weights)
    names = [name for name, _ in first.kernel_paths(x)]
    times, errs = {}, []
    for i, name in enumerate(names):
        def fn(w, i=i):
            return layer(w).kernel_paths(x)[i][1]()

        if want is not None:
            errs.append(_rel_err(fn(weights), want))
        try:
            times[name] = call_ms(fn, weights, method)
        finally:
            layers.clear()
            layers[id(weights)] = first
    table = PathTable()
    table.run(("bench",), first.kernel_paths(x), x.device)
    pick = table.choice.get(("bench",), names[0])
    best = min(times, key=times.get)
    # The PathTable's own single-call timings (us; failed or mismatched paths say so): why it picked what it did.
    runtime_us = {label(k.split(" (")[0]) + (" (" + k.split(" (", 1)[1] if " (" in k else ""): v
                  for k, v in table.timings.get(("bench",), {}).items()}
    return {"ms": times[pick], "path": label(pick), "best_ms": times[best], "best_path": label(best),
            "paths": {label(k): v for k, v in times.items()}, "rel_err": max(errs) if errs else None,
            "runtime_us": runtime_us}


# The runtime's dense int8 layers' results by (scheme, N, K, M, method): the 2:4 int8 rows compare with exactly the
# W8A8 table's figure (scheme "w8a8") or the dense weight-only int8 layer's ("w8a16").
_INT8_DENSE: dict[tuple, dict] = {}


def _w8a8_layer(n: int, k: int):
    from compress.runtime.formats_ct import CTW8A8Linear
    from compress.runtime.spec import LayerSpec

    spec = LayerSpec(name=f"bench.w8a8.{n}x{k}", format="compressed-tensors.w8a8", in_features=k, out_features=n)
    return lambda w: CTW8A8Linear(spec, torch.float16, w[0], w[1])


def _w8a16_layer(n: int, k: int):
    """The runtime's dense weight-only int8 layer, per-channel symmetric (the w8a16_sparse_awq recipe's scheme)."""
    from compress.runtime.formats_ct import CTW8A16Linear
    from compress.runtime.spec import LayerSpec

    spec = LayerSpec(name=f"bench.w8a16.{n}x{k}", format="compressed-tensors.w8a16", in_features=k, out_features=n,
                     args={"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"})
    return lambda w: CTW8A16Linear(spec, torch.float16, w[0], w[1].reshape(n, 1).half(), None)


def _int8_dense(scheme: str, build, ref, label, n: int, k: int, m: int, method: str) -> dict:
    """The runtime's dense int8 layer `build(n, k)` at (N, K, M) on the same int8 weights and activations for every
    scheme: its paths timed and checked against ref(x, wq, ws) (None: unchecked), cached per process."""
    key = (scheme, n, k, m, method)
    if key not in _INT8_DENSE:
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).half()
        want = None if ref is None else ref(x, wq, ws)
        _INT8_DENSE[key] = runtime_paths(build(n, k), (wq, ws), x, want, method, label)
        del wq, ws
    return _INT8_DENSE[key]


def w8a16_dense(n: int, k: int, m: int, method: str) -> dict:
    """The runtime's dense W8A16 layer at (N, K, M): paths timed and checked (cached per process)."""
    def ref(x, wq, ws):
        return (x.float() @ (wq.float() * ws.reshape(n, 1).half().float()).t()).half()

    return _int8_dense("w8a16", _w8a16_layer, ref, str, n, k, m, method)


def _kernel_label(cfg: dict) -> Callable[[str], str]:
    """Names of the runtime's paths for the tables: its "kernel" path with the tiles it runs (`cfg`)."""
    return lambda name: f"kernel: {_path(cfg)}" if name == "kernel" else name


def w8a8_dense(n: int, k: int, m: int, method: str, check: bool = True) -> dict:
    """The runtime's W8A8 layer at (N, K, M): paths timed and checked (cached per process)."""
    from kernels._common import num_sms
    from kernels.w8a8 import _config, w8a8_linear_ref

    label = _kernel_label(_config(m, n, k, num_sms(torch.device("cuda"))))
    return _int8_dense("w8a8", _w8a8_layer, w8a8_linear_ref if check else None, label, n, k, m, method)


# ----------------------------------------------------------------------------------------------- VPTQ
def run_vptq(copy_gbs: float, quick: bool, method: str = DEFAULT_METHOD) -> list[dict]:
    from kernels import vptq_select
    from kernels.vptq import vptq_linear, vptq_linear_ref

    rows = []
    seed_rows = vptq_seed_rows()
    if quick:
        seed_rows = [r for r in seed_rows if r[0] in (1024, 4096, 16384) and r[1] in (1024, 14336, 53248)]
    for count, (k, n, main, res) in enumerate(seed_rows, start=1):
        d = make_vptq(n, k, main, res, "cuda", seed=count)
        x = torch.randn(1, k, device="cuda").half()
        err = _rel_err(vptq_linear(x, n, **d), vptq_linear_ref(x, n, **d)) if n * k <= 4096 * 14336 else None
        w = _dense(n, k)
        ours = call_ms(lambda d: vptq_linear(x, n, **d), d, method)
        ref = _fp16_ms(x, w, method)
        nbytes = sum(t.numel() * t.element_size() for t in d.values() if torch.is_tensor(t)) + 2 * (k + n)
        _emit(rows, {"count": count, "batch_size": 1, "in_features": k, "out_features": n, "main_centroids": main,
                     "residual_centroids": res, "vptq_ms": ours, "torch_ms": ref, "ratio": ours / ref,
                     "gbs": nbytes / (ours * 1e-3) / 1e9, "rel_err": err, "kernel": vptq_select.describe(n, k)})
        del d, w
    return rows


# ---------------------------------------------------------------------------------------------- W4A16
def _tinygemm_pack(u: torch.Tensor, scales: torch.Tensor, group_size: int):
    """Our symmetric nibbles -> torch's tinygemm int4 layout: w = (u - 8) * s + zero, zero = 0."""
    packed = (u[:, ::2].to(torch.int32) << 4 | u[:, 1::2].to(torch.int32)).to(torch.uint8)  # (N, K/2)
    w_tiny = torch.ops.aten._convert_weight_to_int4pack(packed.contiguous(), 8)
    sz = torch.stack([scales.to(torch.bfloat16), torch.zeros_like(scales, dtype=torch.bfloat16)], dim=-1)  # (G, N, 2)
    return w_tiny, sz.contiguous()


class _Gemlite:
    """gemlite (PyPI, Triton) A16W4 g128 as a peer, when importable: same weights, timed like ours (its layer
    module is deep-copied for the rotating copies). Its first call at a new (M, N, K) autotunes for seconds, so
    it runs only at the M values in COMPRESS_BENCH_GEMLITE_M (default "1,16") and stops once it has spent
    COMPRESS_BENCH_GEMLITE_S seconds."""

    def __init__(self, method: str):
        import os
        import time

        self.method = method
        self.ms = {int(v) for v in os.environ.get("COMPRESS_BENCH_GEMLITE_M", "1,16").split(",") if v}
        self.budget = float(os.environ.get("COMPRESS_BENCH_GEMLITE_S", "60"))
        self.clock = time.time
        self.spent = 0.0
        try:
            from gemlite.core import DType, GemLiteLinearTriton

            self.cls, self.dtype = GemLiteLinearTriton, DType.FP16
        except Exception:  # not installed (it is a peer, not a dependency)
            self.cls = None

    def layer(self, u: torch.Tensor, scales: torch.Tensor, n: int, k: int):
        if self.cls is None:
            return None
        lin = self.cls(W_nbits=4, group_size=128, in_features=k, out_features=n, input_dtype=self.dtype, output_dtype=self.dtype)
        s = scales.t().contiguous()  # (N, G)
        lin.pack(u, s, torch.full_like(s, 8.0), bias=None)  # W = (u - 8) * s, our symmetric math
        return lin

    def time(self, lin, x: torch.Tensor, want: torch.Tensor | None) -> tuple[float | None, float | None]:
        """(ms, rel err) or (None, None) where it did not run."""
        if lin is None or x.shape[0] not in self.ms or self.spent > self.budget:
            return None, None
        t0 = self.clock()
        try:
            err = _rel_err(lin(x), want) if want is not None else None
            return call_ms(lambda lin: lin(x), lin, self.method), err
        except Exception:
            return None, None
        finally:
            self.spent += self.clock() - t0


def _path(cfg: dict) -> str:
    """What ran, for the tables: kernel kind and tiles (and the launch options that differ from the defaults)."""
    kind = cfg.get("kind", "int8-gemm")
    if kind == "dequant":
        return "dequant+cuBLAS"
    if kind == "gemv" and "BM" not in cfg:  # kernels/w8a8.py's few-token GEMV: rows per program chosen by N
        tiles = str(cfg.get("BN", "auto"))
    else:
        tiles = "x".join(str(cfg[t]) for t in ("BM", "BN", "BK", "BW", "BQ") if t in cfg)
    extra = f" pdl{cfg['pdl']}" if cfg.get("pdl") else ""
    extra += "".join(f" {k}" if v is True else f" {k}{v}" for k, v in cfg.items()
                     if k in ("waves", "fused", "m_fast", "chain", "fit", "split", "deep", "xf", "qrecip") and v)
    extra += f" {cfg['evict']}" if cfg.get("evict") else ""  # a load's L2 policy, e.g. evict_first
    return f"{kind} {tiles}/{cfg.get('num_warps', '')}w{extra}"


def _ours_w4a16(x, p, gs: int, ref: torch.Tensor | None, method: str = DEFAULT_METHOD) -> dict:
    """Our W4A16 paths on one call: the Triton launcher, the CUDA C++ GEMV where it covers M (<= 64) and built, and at
    one token the CUDA-core GEMV (kernels/w4a16_cc.py) and the warp-specialized GEMV (kernels/w4a16_ws.py; on a shape
    without a measured config, the search config the path table would serve, `paths.family_pick`), at 2-16 tokens the
    warp-specialized GEMM (kernels/w4a16_ws_gemm.py). "ours" is the fastest (the runtime's PathTable makes the same
    choice); rel_err the worst; "cols" each path's time and the winner's launch, as the table's row columns."""
    from kernels import w4a16_cc, w4a16_cuda, w4a16_ws, w4a16_ws_gemm
    from kernels.w4a16 import _config, w4a16_linear

    n = p["qweight"].shape[0]
    tri = call_ms(lambda p: w4a16_linear(x, p["qweight"], p["scales"], p["zeros"], gs), p, method)
    errs = [] if ref is None else [_rel_err(w4a16_linear(x, p["qweight"], p["scales"], p["zeros"], gs), ref)]
    k, m = x.shape[-1], x.shape[0]
    timed = {"triton": tri}
    plans = {"triton": lambda: _path(_config(m, n, k))}  # the winner's launch config as text
    # (key, kernels module, launcher, its launch config as text): each timed where its `supports` takes the call.
    for key, mod, launch, planned in (
            ("cuda", w4a16_cuda, w4a16_cuda.w4a16_gemv, lambda: w4a16_cuda.planned(n, k, m)),
            ("cc", w4a16_cc, w4a16_cc.w4a16_cc_gemv, lambda: w4a16_cc.planned(n, k, x.device)),
            ("ws", w4a16_ws, w4a16_ws.w4a16_ws_gemv, lambda: w4a16_ws.planned(n, k, x.device)),
            ("wsm", w4a16_ws_gemm, w4a16_ws_gemm.w4a16_ws_gemm, lambda: w4a16_ws_gemm.planned(n, k, m, x.device))):
        if not mod.supports(x, p["qweight"], p["scales"], p["zeros"], gs):
            continue
        if key == "ws":  # the configs the runtime offers its path table for this shape (one, where measured)
            ms, config_of = {}, {}  # by the runtime's path names (formats_compress): "ws", "ws#c"
            for i, c in enumerate(w4a16_ws.candidate_configs(n, k, w4a16_cuda.gpu_name(x.device))):
                try:  # a search config whose ring and staged x do not fit an SM for this K is refused, as in the runtime
                    launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c)  # eager: outside any graph capture
                except CompressError:
                    continue
                name = "ws" if i == 0 else f"ws#{c}"
                config_of[name] = c
                ms[name] = call_ms(lambda p, c=c: launch(x, p["qweight"], p["scales"], p["zeros"], gs, config=c), p,
                                   method)
            if not ms:
                continue
            name = family_pick(list(ms), ms, "ws")  # what the path table serves: VARIANT_MARGIN over the default
            cfg = config_of[name]
            launch = partial(launch, config=cfg)
            timed[key], planned = ms[name], (lambda cfg=cfg: w4a16_ws.describe(cfg))
        else:
            timed[key] = call_ms(lambda p: launch(x, p["qweight"], p["scales"], p["zeros"], gs), p, method)
        if ref is not None:
            errs.append(_rel_err(launch(x, p["qweight"], p["scales"], p["zeros"], gs), ref))
        plans[key] = planned
    won = min(timed, key=timed.get)
    return {"ours": timed[won], "rel_err": max(errs) if errs else None,
            "cols": {"triton_ms": tri, "cuda_gemv_ms": timed.get("cuda"), "cc_gemv_ms": timed.get("cc"),
                     "ws_gemv_ms": timed.get("ws"), "ws_gemm_ms": timed.get("wsm"), "path": plans[won]()}}


def w4a16_table_builds(ms: list[int]) -> list[str]:
    """The W4A16 CUDA GEMV builds the table runs: the default config's variant of every Llama-3 shape at every M it
    serves (the library a call builds on first use), plus DEFAULT_VARIANT (what `supports` builds)."""
    from kernels import w4a16_cuda

    gpu = w4a16_cuda.gpu_name(torch.device("cuda"))
    names = {w4a16_cuda.DEFAULT_VARIANT}
    names |= {w4a16_cuda.default_config(m, n, k, gpu)[0] for _, n, k in LLAMA_SHAPES for m in ms if m <= w4a16_cuda.MAX_M}
    return sorted(names)


def sparse24_table_builds() -> list[tuple[str, str]]:
    """The 2:4 table's CUDA builds, (kernel module, variant): the int8 GEMV's one build (kernels/i8_gemv.py, the W8A8
    values at a few tokens) and every build the W8A16 GEMV offers the runtime (kernels/sp24_w16_gemv.py); none of a
    kernel turned off (COMPRESS_I8_GEMV=0, COMPRESS_SP24_W16=0)."""
    from kernels import i8_gemv, sp24_w16_gemv

    return ([("i8_gemv", i8_gemv.DEFAULT_VARIANT)] if i8_gemv.enabled() else []) + \
        ([("sp24_w16_gemv", v) for v in sp24_w16_gemv.runtime_variants()] if sp24_w16_gemv.enabled() else [])


def prebuild(suite: str, builds: list[tuple[str, str]], arch_code: str) -> list[str]:
    """Compile a suite's CUDA builds, (kernel module, variant), at once (kernels.cuda_build.compile_parallel), and
    return the ones that failed, each with the end of its error (nvcc's message). Built one at a time on first use, they took most of a table's time on a fresh machine (session
    26's W4A16 quick table: 17 of 32 rows in 310 s; session 27, prebuilt: 8 builds in 42 s, all 68 rows in 104 s). A
    build that fails is left to the row that needs it, which then reports it."""
    import functools
    import importlib

    from kernels import cuda_build

    t0 = time.time()
    jobs = [functools.partial(importlib.import_module(f"kernels.{module}").compile_variant, arch_code, variant)
            for module, variant in builds]
    failed = [f"{builds[i][0]} {builds[i][1]} ({str(e)[-200:]})" for i, e in cuda_build.compile_parallel(jobs)]
    print(f"[bench] {suite}: {len(builds) - len(failed)} CUDA builds ready in {time.time() - t0:.0f} s"
          + (f"; failed, the rows that need them say so: {failed}" if failed else ""), flush=True)
    return failed


def _prebuild_suite(suite: str, builds: list[tuple[str, str]]) -> None:
    """`prebuild` on this machine's GPU, where there is an nvcc (without one the rows report the missing compiler)."""
    from kernels import cuda_build

    if builds and cuda_build.nvcc() is not None:
        prebuild(suite, builds, cuda_build.arch(torch.device("cuda")))


def run_w4a16(copy_gbs: float, quick: bool, method: str = DEFAULT_METHOD) -> list[dict]:
    from compress.packing.int4 import unpack_int4
    from kernels.w4a16 import w4a16_linear_ref

    from kernels import w4a16_cc, w4a16_cuda, w4a16_ws, w4a16_ws_gemm

    if w4a16_cuda.enabled():
        _prebuild_suite("w4a16", [("w4a16_cuda", v) for v in w4a16_table_builds(QUICK_M if quick else BENCH_M)]
                        + ([("w4a16_cc", "cc")] if w4a16_cc.enabled() else [])
                        + ([("w4a16_ws", "ws")] if w4a16_ws.enabled() else [])
                        + ([("w4a16_ws_gemm", "wsm")] if w4a16_ws_gemm.enabled() else []))
    rows = []
    gl = _Gemlite(method)
    for name, n, k in LLAMA_SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w = _dense(n, k)
        u = unpack_int4(p["qweight"], k)
        try:
            tiny = _tinygemm_pack(u, p["scales"], 128)
        except RuntimeError:
            tiny = None
        try:
            glin = gl.layer(u, p["scales"], n, k)
        except Exception:
            glin = None
        wbytes = p["qweight"].numel() * 4 + p["scales"].numel() * 2
        for m in QUICK_M if quick else BENCH_M:
            x = torch.randn(m, k, device="cuda").half()
            want = w4a16_linear_ref(x, p["qweight"], p["scales"])
            o = _ours_w4a16(x, p, 128, want, method)
            ref = _fp16_ms(x, w, method)
            peer = None
            if tiny is not None:
                xb = x.bfloat16()
                peer = call_ms(lambda t: torch.ops.aten._weight_int4pack_mm(xb, t[0], 128, t[1]), tiny, method)
            gl_ms, gl_err = gl.time(glin, x, want)
            _emit(rows, _row(name, n, k, m, o["ours"], ref, wbytes + 2 * m * (k + n), copy_gbs, rel_err=o["rel_err"],
                             tinygemm_ms=peer, gemlite_ms=gl_ms, gemlite_rel_err=gl_err, **o["cols"]))
        del p, w, tiny, glin, u
    # Group 64 and asymmetric at decode sizes, for the record.
    for name, n, k in LLAMA_SHAPES[:4]:
        for gs, sym in ((64, True), (128, False), (64, False)):
            p = make_int4(n, k, gs, sym, torch.float16, "cuda", seed=gs)
            w = _dense(n, k)
            wbytes = p["qweight"].numel() * 4 + p["scales"].numel() * 2 + (p["zeros"].numel() if p["zeros"] is not None else 0)
            for m in (1, 8, 16):
                x = torch.randn(m, k, device="cuda").half()
                o = _ours_w4a16(x, p, gs, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs), method)
                ref = _fp16_ms(x, w, method)
                _emit(rows, _row(name, n, k, m, o["ours"], ref, wbytes + 2 * m * (k + n), copy_gbs, rel_err=o["rel_err"],
                                 variant=f"g{gs} {'sym' if sym else 'asym'}", **o["cols"]))
    return rows


# ----------------------------------------------------------------------------------------------- W8A8
def run_w8a8(copy_gbs: float, quick: bool, method: str = DEFAULT_METHOD) -> list[dict]:
    rows = []
    for name, n, k in LLAMA_SHAPES:
        w = _dense(n, k)
        wt = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8)
        for m in QUICK_M if quick else BENCH_M:
            d = w8a8_dense(n, k, m, method)
            x = torch.randn(m, k, device="cuda").half()
            ref = _fp16_ms(x, w, method)
            peer = None
            if m > 16:  # torch._int_mm alone: activations already int8, no scaling (its (K, N) column-major operand)
                xq = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8)
                peer = call_ms(lambda wt: torch._int_mm(xq, wt.t()), wt, method)
            _emit(rows, _row(name, n, k, m, d["ms"], ref, n * k + 4 * n + 2 * m * (k + n), copy_gbs, rel_err=d["rel_err"],
                             int_mm_ms=peer, path=d["path"], best_ms=d["best_ms"], best_path=d["best_path"],
                             paths_ms=d["paths"], pathtable_us=d["runtime_us"]))
        del w, wt
    return rows


# ----------------------------------------------------------------------------------------------- 2:4
def _sparse24_layer(n: int, k: int, base_format: str = "dense"):
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.spec import LayerSpec

    spec = LayerSpec(name=f"bench.sparse24.{n}x{k}", format="compress.sparse24", in_features=k, out_features=n,
                     args={"version": 1, "base_format": base_format})
    return lambda q: Sparse24Linear(spec, torch.float16, q["values"], q["meta"], q.get("w_scale"), q.get("meta_frag"),
                                    q.get("meta_frag_w16"))


def run_sparse24(copy_gbs: float, quick: bool, method: str = DEFAULT_METHOD) -> list[dict]:
    from kernels.cases import prune_24
    from kernels.sparse24 import _config, _config_w8a16, sparse24_linear_ref, sparse24_w8a8_linear_ref, sparse24_w8a16_linear_ref

    _prebuild_suite("sparse24", sparse24_table_builds())
    rows = []
    ms = [1, 16, 256] if quick else BENCH_M
    for name, n, k in LLAMA_SHAPES:
        p = make_sparse24(n, k, torch.float16, "cuda", seed=n + k)
        w = _dense(n, k)
        try:
            from torch.sparse import to_sparse_semi_structured

            semi = to_sparse_semi_structured(prune_24(w))
        except Exception:  # cuSPARSELt/CUTLASS semi-structured support varies by build
            semi = None
        fbytes = p["values"].numel() * 2 + p["meta"].numel() * 4
        for m in ms:
            x = torch.randn(m, k, device="cuda").half()
            o = runtime_paths(_sparse24_layer(n, k), p, x, sparse24_linear_ref(x, p["values"], p["meta"]), method,
                              _kernel_label(_config(m, False, n, k)))
            ref = _fp16_ms(x, w, method)
            peer = None
            if semi is not None:
                try:
                    peer = call_ms(lambda s: F.linear(x, s), semi, method)
                except Exception:
                    peer = None
            _emit(rows, _row(name, n, k, m, o["ms"], ref, fbytes + 2 * m * (k + n), copy_gbs, rel_err=o["rel_err"],
                             variant="fp16", dense_ms=ref, dense_path="torch fp16 F.linear", torch_semi_structured_ms=peer,
                             path=o["path"], best_ms=o["best_ms"], best_path=o["best_path"], paths_ms=o["paths"],
                             pathtable_us=o["runtime_us"]))
        del p, w, semi
        q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        if k % 128 == 0:  # the CUDA GEMVs' metadata registers, built here: the timed layers are made in a capture
            from kernels import i8_gemv, sp24_w16_gemv

            q["meta_frag"] = i8_gemv.pack_meta_fragments(q["meta"], n, k)
            q["meta_frag_w16"] = sp24_w16_gemv.pack_meta_fragments(q["meta"], n, k)
        qbytes = q["values"].numel() + q["meta"].numel() * 4 + 4 * n
        w = _dense(n, k)
        # The int8 values as W8A8 (quantized activations), then weight-only (W8A16, session 17), each against the
        # runtime's dense layer of that scheme.
        for variant, base, ref, cfg_at, dense_at in (
                ("int8 (W8A8)", "dense", sparse24_w8a8_linear_ref, lambda m: _config(m, True, n, k), w8a8_dense),
                ("int8 (W8A16)", "compressed-tensors.w8a16", sparse24_w8a16_linear_ref,
                 lambda m: _config_w8a16(m, n, k), w8a16_dense)):
            for m in ms:
                x = torch.randn(m, k, device="cuda").half()
                want = ref(x, q["values"], q["meta"], q["w_scale"])
                o = runtime_paths(_sparse24_layer(n, k, base), q, x, want, method, _kernel_label(cfg_at(m)))
                dense = dense_at(n, k, m, method)
                ref_ms = _fp16_ms(x, w, method)
                _emit(rows, _row(name, n, k, m, o["ms"], ref_ms, qbytes + 2 * m * (k + n), copy_gbs,
                                 rel_err=o["rel_err"], variant=variant, dense_ms=dense["ms"], dense_path=dense["path"],
                                 path=o["path"], best_ms=o["best_ms"], best_path=o["best_path"], paths_ms=o["paths"],
                                 pathtable_us=o["runtime_us"]))
        del q, w
    return rows


SUITES = {"vptq": run_vptq, "w4a16": run_w4a16, "w8a8": run_w8a8, "sparse24": run_sparse24}


def median_speedup(rows: list[dict], m: int, key: str = "speedup", **match) -> float | None:
    vals = [r[key] for r in rows if r.get("M") == m and all(r.get(a) == b for a, b in match.items())]
    return statistics.median(vals) if vals else None
