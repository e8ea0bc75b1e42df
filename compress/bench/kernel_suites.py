"""The four suites of `compress bench kernels`: each builds real-shape layers, checks our kernel against
its reference once per shape, then times ours, torch fp16 and the peers that run here, in one run.

Row dicts carry everything the report prints; bytes are counted explicitly (weights + their metadata
+ activations in + outputs out) so GB/s is comparable across kernels.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from compress.bench.kernel_timing import time_ms
from kernels.cases import BENCH_M, LLAMA_SHAPES, make_int4, make_sparse24, make_vptq, make_w8a8, vptq_seed_rows

QUICK_M = [1, 16, 64, 256]


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30)).item())


def _row(name, n, k, m, ours_ms, torch_ms, nbytes, copy_gbs, **extra) -> dict:
    gbs = nbytes / (ours_ms * 1e-3) / 1e9
    return {"layer": name, "N": n, "K": k, "M": m, "kernel_ms": ours_ms, "torch_ms": torch_ms, "ratio": ours_ms / torch_ms,
            "speedup": torch_ms / ours_ms, "gbs": gbs, "pct_copy_bw": 100 * gbs / copy_gbs, **extra}


def _dense(n: int, k: int, dtype=torch.float16) -> torch.Tensor:
    return (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)


# ----------------------------------------------------------------------------------------------- VPTQ
def run_vptq(copy_gbs: float, quick: bool) -> list[dict]:
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
        ours = time_ms(lambda: vptq_linear(x, n, **d))
        ref = time_ms(lambda: F.linear(x, w))
        nbytes = sum(t.numel() * t.element_size() for t in d.values() if torch.is_tensor(t)) + 2 * (k + n)
        rows.append({"count": count, "batch_size": 1, "in_features": k, "out_features": n, "main_centroids": main,
                     "residual_centroids": res, "vptq_ms": ours, "torch_ms": ref, "ratio": ours / ref,
                     "gbs": nbytes / (ours * 1e-3) / 1e9, "rel_err": err})
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
    """gemlite (PyPI, Triton) A16W4 g128 as a peer, when importable: same weights, timed under CUDA graphs
    like ours. Its first call at a new (M, N, K) autotunes for seconds, so it runs only at the M values in
    COMPRESS_BENCH_GEMLITE_M (default "1,16") and stops once it has spent COMPRESS_BENCH_GEMLITE_S seconds."""

    def __init__(self):
        import os
        import time

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

    def time(self, lin, x: torch.Tensor) -> float | None:
        if lin is None or x.shape[0] not in self.ms or self.spent > self.budget:
            return None
        t0 = self.clock()
        try:
            return time_ms(lambda: lin(x))
        except Exception:
            return None
        finally:
            self.spent += self.clock() - t0


def _path(cfg: dict) -> str:
    """What ran, for the tables: kernel kind and tiles."""
    kind = cfg.get("kind", "int8-gemm")
    if kind == "dequant":
        return "dequant+cuBLAS"
    tiles = "x".join(str(cfg[t]) for t in ("BM", "BN", "BK", "BW") if t in cfg)
    extra = f" pdl{cfg['pdl']}" if cfg.get("pdl") else ""
    return f"{kind} {tiles}/{cfg.get('num_warps', '')}w{extra}"


def _ours_w4a16(x, p, gs: int, ref: torch.Tensor | None) -> dict:
    """Our W4A16 paths on one call: the Triton launcher, and the CUDA C++ GEMV where it covers M (<= 16) and built.
    kernel_ms is the faster of the two (the runtime's PathTable makes the same choice); rel_err the worse."""
    from kernels import w4a16_cuda
    from kernels.w4a16 import _config, w4a16_linear

    args = (x, p["qweight"], p["scales"], p["zeros"], gs)
    n = p["qweight"].shape[0]
    tri = time_ms(lambda: w4a16_linear(*args))
    errs = [] if ref is None else [_rel_err(w4a16_linear(*args), ref)]
    cuda = None
    if w4a16_cuda.supports(*args):
        cuda = time_ms(lambda: w4a16_cuda.w4a16_gemv(*args))
        if ref is not None:
            errs.append(_rel_err(w4a16_cuda.w4a16_gemv(*args), ref))
    won = cuda is not None and cuda < tri
    return {"ours": cuda if won else tri, "triton_ms": tri, "cuda_gemv_ms": cuda, "rel_err": max(errs) if errs else None,
            "path": w4a16_cuda.planned(n, x.shape[-1], x.shape[0]) if won else _path(_config(x.shape[0], n))}


def run_w4a16(copy_gbs: float, quick: bool) -> list[dict]:
    from compress.packing.int4 import unpack_int4
    from kernels.w4a16 import w4a16_linear_ref

    rows = []
    gl = _Gemlite()
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
            want = w4a16_linear_ref(x, p["qweight"], p["scales"]) if m in (1, 2, 4, 8, 16, 64, 256) else None
            o = _ours_w4a16(x, p, 128, want)
            ref = time_ms(lambda: F.linear(x, w))
            peer = None
            if tiny is not None:
                xb = x.bfloat16()
                peer = time_ms(lambda: torch.ops.aten._weight_int4pack_mm(xb, tiny[0], 128, tiny[1]))
            rows.append(_row(name, n, k, m, o["ours"], ref, wbytes + 2 * m * (k + n), copy_gbs, rel_err=o["rel_err"],
                             tinygemm_ms=peer, gemlite_ms=gl.time(glin, x), triton_ms=o["triton_ms"],
                             cuda_gemv_ms=o["cuda_gemv_ms"], path=o["path"]))
        del p, w, tiny, glin, u
    # Group 64 and asymmetric at decode sizes, for the record.
    for name, n, k in LLAMA_SHAPES[:4]:
        for gs, sym in ((64, True), (128, False), (64, False)):
            p = make_int4(n, k, gs, sym, torch.float16, "cuda", seed=gs)
            w = _dense(n, k)
            wbytes = p["qweight"].numel() * 4 + p["scales"].numel() * 2 + (p["zeros"].numel() if p["zeros"] is not None else 0)
            for m in (1, 8, 16):
                x = torch.randn(m, k, device="cuda").half()
                o = _ours_w4a16(x, p, gs, w4a16_linear_ref(x, p["qweight"], p["scales"], p["zeros"], gs))
                ref = time_ms(lambda: F.linear(x, w))
                rows.append(_row(name, n, k, m, o["ours"], ref, wbytes + 2 * m * (k + n), copy_gbs, rel_err=o["rel_err"],
                                 variant=f"g{gs} {'sym' if sym else 'asym'}", triton_ms=o["triton_ms"],
                                 cuda_gemv_ms=o["cuda_gemv_ms"], path=o["path"]))
    return rows


# ----------------------------------------------------------------------------------------------- W8A8
def run_w8a8(copy_gbs: float, quick: bool) -> list[dict]:
    from kernels.w8a8 import _config, w8a8_linear, w8a8_linear_ref

    rows = []
    for name, n, k in LLAMA_SHAPES:
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        w = _dense(n, k)
        wt = wq.t()  # (K, N) column-major view, the layout torch._int_mm wants for its right operand
        for m in QUICK_M if quick else BENCH_M:
            x = torch.randn(m, k, device="cuda").half()
            err = _rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) if m in (1, 16, 64, 256) else None
            ours = time_ms(lambda: w8a8_linear(x, wq, ws))
            ref = time_ms(lambda: F.linear(x, w))
            peer = None
            if m > 16:
                xq = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8)
                peer = time_ms(lambda: torch._int_mm(xq, wt))
            rows.append(_row(name, n, k, m, ours, ref, n * k + 4 * n + 2 * m * (k + n), copy_gbs, rel_err=err, int_mm_ms=peer,
                             path=_path(_config(m))))
        del wq, ws, w, wt
    return rows


# ----------------------------------------------------------------------------------------------- 2:4
def run_sparse24(copy_gbs: float, quick: bool) -> list[dict]:
    from kernels.sparse24 import _config, sparse24_linear, sparse24_linear_ref, sparse24_w8a8_linear, sparse24_w8a8_linear_ref
    from kernels.w8a8 import w8a8_linear

    rows = []
    ms = [1, 16, 256] if quick else BENCH_M
    for name, n, k in LLAMA_SHAPES:
        p = make_sparse24(n, k, torch.float16, "cuda", seed=n + k)
        w = _dense(n, k)
        semi = None
        try:
            from kernels.cases import prune_24
            from torch.sparse import to_sparse_semi_structured

            semi = to_sparse_semi_structured(prune_24(w))
        except Exception:  # cuSPARSELt/CUTLASS semi-structured support varies by build
            semi = None
        fbytes = p["values"].numel() * 2 + p["meta"].numel() * 4
        for m in ms:
            x = torch.randn(m, k, device="cuda").half()
            err = _rel_err(sparse24_linear(x, p["values"], p["meta"]), sparse24_linear_ref(x, p["values"], p["meta"])) \
                if m in (1, 16, 256) else None
            ours = time_ms(lambda: sparse24_linear(x, p["values"], p["meta"]))
            ref = time_ms(lambda: F.linear(x, w))
            peer = None
            if semi is not None:
                try:
                    peer = time_ms(lambda: F.linear(x, semi))
                except Exception:
                    peer = None
            rows.append(_row(name, n, k, m, ours, ref, fbytes + 2 * m * (k + n), copy_gbs, rel_err=err,
                             variant="fp16", dense_ms=ref, torch_semi_structured_ms=peer, path=_path(_config(m))))
        del p, w, semi
        q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        wq, ws = make_w8a8(n, k, "cuda", seed=n + k)
        qbytes = q["values"].numel() + q["meta"].numel() * 4 + 4 * n
        w = _dense(n, k)
        for m in ms:
            x = torch.randn(m, k, device="cuda").half()
            err = _rel_err(sparse24_w8a8_linear(x, q["values"], q["meta"], q["w_scale"]),
                           sparse24_w8a8_linear_ref(x, q["values"], q["meta"], q["w_scale"])) if m in (1, 16, 256) else None
            ours = time_ms(lambda: sparse24_w8a8_linear(x, q["values"], q["meta"], q["w_scale"]))
            dense_int8 = time_ms(lambda: w8a8_linear(x, wq, ws))
            ref = time_ms(lambda: F.linear(x, w))
            rows.append(_row(name, n, k, m, ours, ref, qbytes + 2 * m * (k + n), copy_gbs, rel_err=err,
                             variant="int8 (W8A8)", dense_ms=dense_int8, path=_path(_config(m, True))))
        del q, wq, ws, w
    return rows


SUITES = {"vptq": run_vptq, "w4a16": run_w4a16, "w8a8": run_w8a8, "sparse24": run_sparse24}


def median_speedup(rows: list[dict], m: int, key: str = "speedup", **match) -> float | None:
    vals = [r[key] for r in rows if r.get("M") == m and all(r.get(a) == b for a, b in match.items())]
    return statistics.median(vals) if vals else None
