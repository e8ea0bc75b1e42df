"""Decode-shaped timing of the W4A16 CUDA GEMV (kernels/w4a16_cuda.py), session 4. Run on the GPU from the repo root:

    python3 bench/results/h100/kernels/w4a16_cuda_s4_bench.py OUT_DIR old|new|report

Method ("rotating"): for one implementation and one layer shape, a CUDA graph replays the call over C distinct
copies of the layer's weights, C x bytes >= 2.5 x the L2 (so every call reads its weights from DRAM, as in a
decode step where the model is >> L2), at least 120 calls per graph, back to back (no flush, so no dirty-L2
write-back inside the timed region, and no launch gaps: graph replay). Per-call time = median replay time /
calls. GB/s counts the int4 weights + scales once per call (activations and outputs are < 0.1%).
The same method times:
- "read": a plain 16-byte streaming read kernel (w4a16_cuda_s4_read.cu) over buffers of the same byte count,
  the better of a one-pass grid and a persistent grid (the ceiling for a single-pass kernel of that size);
- "fp16": torch F.linear on fp16 weights of the shape (cuBLAS), over rotating fp16 copies;
- "old": session 3's GEMV (w4a16_cuda_s4_old.cu = kernels/csrc/w4a16_gemv.cu at 2026-11-22 06:00, M <= 8,
  its own defaults: w4s2 waves 1 at M <= 2, w8s2 waves 2 at M <= 8), and the Triton launcher at M = 16 (what
  the runtime used there);
- "new": the current kernels/csrc/w4a16_gemv.cu, every build variant x waves with plain launches, then the best
  of those in "modes": 1 programmatic dependent launch (waits first), 2 the same with the weights read before the
  wait, 4 split-K reduction inside a thread-block cluster, 6 = 4 + 2.
"token" rows: one graph = a whole decode step's GEMVs: Llama-3-8B 32 layers x (qkv 4096->6144, o 4096->4096,
gate_up 4096->28672, down 14336->4096) and Qwen3-8B 36 layers x (qkv 4096->6144, o, gate_up 4096->24576,
down 12288->4096), every layer its own weights (3.6 / 3.4 GB of int4 + scales), 1 token; compared with
2.108 ms, the GEMV GPU time per token in the session-3 end-to-end profile (e2e/session3/final/llama-3-8b).
Sections old / new run in separate processes (a kernel fault in one leaves the other's JSON); report writes
OUT_DIR/w4a16_cuda_s4.md from both.
"""

from __future__ import annotations

import ctypes
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from compress.bench import kernel_timing
from compress.packing.int4 import padded_k
from kernels import cuda_build, w4a16_cuda
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear, w4a16_linear_ref

HERE = Path(__file__).resolve().parent
OLD_SRC = HERE / "w4a16_cuda_s4_old.cu"
READ_SRC = HERE / "w4a16_cuda_s4_read.cu"
SHAPES = {  # name -> (N, K)
    "8B qkv": (6144, 4096), "8B q/o": (4096, 4096), "8B gate_up": (28672, 4096), "8B down": (4096, 14336),
    "8B k/v": (1024, 4096), "8B gate/up": (14336, 4096),
    "70B q/o": (8192, 8192), "70B k/v": (1024, 8192), "70B gate/up": (28672, 8192), "70B down": (8192, 28672),
    "Qwen3 gate_up": (24576, 4096), "Qwen3 down": (4096, 12288),
}
STANDARD = ["8B q/o", "8B k/v", "8B gate/up", "8B down", "70B q/o", "70B k/v", "70B gate/up", "70B down"]
TOKENS = {"Llama-3-8B": (32, ["8B qkv", "8B q/o", "8B gate_up", "8B down"]),
          "Qwen3-8B": (36, ["8B qkv", "8B q/o", "Qwen3 gate_up", "Qwen3 down"])}
MS = [1, 16]
WAVES = [0.5, 1.0, 2.0]
MODES = (1, 2, 4, 6)  # launch modes tried on the best plain config: pdl, pdl early, cluster, cluster + pdl early
MIN_CALLS = 120
REPS = 15
OLD_VARIANTS = {"w4s2": (4, 2, 0), "w8s2": (8, 2, 0)}
OLD_DEFAULTS = {2: ("w4s2", 1.0), 8: ("w8s2", 2.0)}
E2E_GEMV_MS = 2.108


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------------ timing
def graph_us(calls: list, min_calls: int = MIN_CALLS, reps: int = REPS) -> float:
    """Median per-call microseconds of a CUDA graph that runs `calls` (thunks) in order, repeated to >= min_calls:
    the tables' rotating timing (compress.bench.kernel_timing.graph_us) with no cap on the graph's length, as this
    script ran in session 4."""
    return kernel_timing.graph_us(calls, min_calls=min_calls, reps=reps, max_graph_ms=1e12)


def copy_gbs() -> float:
    src = torch.randn(2**28, device="cuda").half()  # 512 MB
    dst = torch.empty_like(src)
    us = graph_us([lambda: dst.copy_(src)], min_calls=10, reps=10)
    return 2 * src.numel() * 2 / (us * 1e-6) / 1e9


# ------------------------------------------------------------------------------------------------ layers
_protos: dict[str, dict] = {}


def proto(name: str) -> dict:
    if name not in _protos:
        n, k = SHAPES[name]
        _protos[name] = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
    return _protos[name]


def int4_bytes(name: str) -> int:
    p = proto(name)
    return p["qweight"].numel() * 4 + p["scales"].numel() * 2


def copies(name: str, count: int | None = None) -> list[dict]:
    p = proto(name)
    count = count or max(2, math.ceil(2.5 * L2 / int4_bytes(name)))
    return [p] + [{"qweight": p["qweight"].clone(), "scales": p["scales"].clone()} for _ in range(count - 1)]


def fp16_copies(name: str) -> list[torch.Tensor]:
    n, k = SHAPES[name]
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) / math.sqrt(k)
    count = max(2, math.ceil(2.5 * L2 / (n * k * 2)))
    return [w] + [w.clone() for _ in range(count - 1)]


# ------------------------------------------------------------------------------------------------ implementations
_old_libs: dict[str, ctypes.CDLL] = {}
_old_ws: list[torch.Tensor] = []


def old_lib(name: str) -> ctypes.CDLL:
    if name not in _old_libs:
        warps, stage, load = OLD_VARIANTS[name]
        path = cuda_build.compile_library(OLD_SRC, "old_" + name, [f"-DW4_WARPS={warps}", f"-DW4_STAGE={stage}",
                                          f"-DW4_LOAD={load}"], cuda_build.arch(torch.device("cuda")), "old GEMV", "-")
        so = ctypes.CDLL(str(path))
        p, i = ctypes.c_void_p, ctypes.c_int
        so.w4a16_gemv.restype = i
        so.w4a16_gemv.argtypes = [p, i, p, p, p, p, p, p, i, i, i, i, i, i, i, p]
        _old_libs[name] = so
    return _old_libs[name]


def old_plan(n: int, k: int, m: int, warps: int, waves: float) -> tuple[int, int]:
    """Session 3's kernels/w4a16_cuda.plan, verbatim in effect."""
    kblocks = padded_k(k) // 128
    groups = -(-n // (16 * warps))
    want = max(1, int(SMS * (16 // warps) * waves))
    split = max(1, min(kblocks, -(-want // groups)))
    per = -(-kblocks // split)
    per = max(per, min(2, kblocks))
    per = min(per, 32 * 1024 // (256 * m))
    return per, -(-kblocks // per)


def old_call(x: torch.Tensor, p: dict) -> torch.Tensor:
    m, k = x.shape
    n = p["qweight"].shape[0]
    name, waves = OLD_DEFAULTS[2 if m <= 2 else 8]
    lib = old_lib(name)
    per, split = old_plan(n, k, m, OLD_VARIANTS[name][0], waves)
    if not _old_ws:
        _old_ws.extend([torch.empty(1 << 23, device="cuda"), torch.zeros(8192, dtype=torch.int32, device="cuda")])
    out = torch.empty(m, n, device="cuda", dtype=x.dtype)
    rc = lib.w4a16_gemv(x.data_ptr(), 0, p["qweight"].data_ptr(), p["scales"].data_ptr(), None, out.data_ptr(),
                        _old_ws[0].data_ptr(), _old_ws[1].data_ptr(), m, n, k, x.stride(0), 128, per, split,
                        torch.cuda.current_stream().cuda_stream)
    assert rc == 0, rc
    return out


_read = []


def read_call(buf: torch.Tensor, blocks: int) -> None:
    if not _read:
        so = ctypes.CDLL(str(cuda_build.compile_library(READ_SRC, "read", [], cuda_build.arch(torch.device("cuda")),
                                                        "read reference", "-")))
        so.read_bytes.restype = ctypes.c_int
        so.read_bytes.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        _read.extend([so, torch.zeros(4, dtype=torch.int32, device="cuda")])
    rc = _read[0].read_bytes(buf.data_ptr(), buf.numel(), _read[1].data_ptr(), blocks,
                             torch.cuda.current_stream().cuda_stream)
    assert rc == 0, rc


def new_call(cfg: tuple[str, float, int]):
    """cfg = (variant, waves, mode): mode 0 plain, 1 pdl, 2 pdl early, + 4 cluster reduction."""
    name, waves, mode = cfg
    return lambda x, p: w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=name, waves=waves,
                                           pdl=mode & 3, cluster=bool(mode & 4))


def rel_err(a, b) -> float:
    return float(((a.float() - b.float()).norm() / b.float().norm()).item())


def xs_for(m: int, k: int) -> torch.Tensor:
    return torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m + k)).half()


_refs: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def time_impl(fn, name: str, m: int, layer_copies: list[dict]) -> dict:
    if (name, m) not in _refs:
        _refs.clear()  # one shape at a time: the fp32 references of the 70B layers are large
        x = xs_for(m, SHAPES[name][1])
        _refs[(name, m)] = (x, w4a16_linear_ref(x, proto(name)["qweight"], proto(name)["scales"], None, 128))
    x, ref = _refs[(name, m)]
    err = rel_err(fn(x, layer_copies[0]), ref)
    us = graph_us([lambda p=p: fn(x, p) for p in layer_copies])
    return {"us": us, "gbs": int4_bytes(name) / (us * 1e-6) / 1e9, "rel_err": err}


def time_safe(fn, name: str, m: int, layer_copies: list[dict]) -> dict:
    """time_impl, or an infinite time with the error (a launch refused for this config) so the sweep goes on."""
    try:
        return time_impl(fn, name, m, layer_copies)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON and logged
        log(f"[new] {name} M={m}: {type(e).__name__}: {str(e)[:200]}")
        torch.cuda.synchronize()
        return {"us": float("inf"), "gbs": 0.0, "rel_err": float("nan"), "error": str(e)[:300]}


def time_read(name: str, cps: list[dict]) -> dict:
    nbytes = int4_bytes(name)
    bufs = [torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda") for _ in range(len(cps))]
    best = None
    for blocks in (0, SMS * 8):
        us = graph_us([lambda b=b: read_call(b, blocks) for b in bufs])
        best = us if best is None else min(best, us)
    del bufs
    return {"us": best, "gbs": nbytes / (best * 1e-6) / 1e9}


def time_fp16(name: str, m: int) -> dict:
    ws = fp16_copies(name)
    x = xs_for(m, SHAPES[name][1])
    us = graph_us([lambda w=w: F.linear(x, w) for w in ws])
    del ws
    return {"us": us}


def token(model: str, fn, layers: dict) -> dict:
    """One graph = the model's GEMVs of one decode step (M = 1), every layer its own weights."""
    nl, names = TOKENS[model]
    xs = {nm: xs_for(1, SHAPES[nm][1]) for nm in names}
    calls = [lambda nm=nm, p=p: fn(xs[nm], p) for i in range(nl) for nm, p in ((nm, layers[nm][i]) for nm in names)]
    us = graph_us(calls, min_calls=len(calls), reps=10)
    total = len(calls) * us
    nbytes = nl * sum(int4_bytes(nm) for nm in names)
    return {"ms": total / 1000, "gbs": nbytes / (total * 1e-6) / 1e9, "bytes": nbytes}


def token_layers(model: str) -> dict:
    nl, names = TOKENS[model]
    return {nm: copies(nm, nl) for nm in names}


def token_read(model: str) -> dict:
    nl, names = TOKENS[model]
    bufs = [torch.randint(0, 255, (int4_bytes(nm),), dtype=torch.uint8, device="cuda") for _ in range(nl) for nm in names]
    best = None
    for blocks in (0, SMS * 8):
        us = graph_us([lambda b=b: read_call(b, blocks) for b in bufs], min_calls=len(bufs), reps=10)
        best = us if best is None else min(best, us)
    nbytes = sum(b.numel() for b in bufs)
    del bufs
    return {"ms": best * len(TOKENS[model][1]) * nl / 1000, "gbs": nbytes / (best * 1e-6 * len(TOKENS[model][1]) * nl) / 1e9}


# ------------------------------------------------------------------------------------------------ sections
def save(out: Path, section: str, data: dict) -> None:
    (out / f"w4a16_cuda_s4_{section}.json").write_text(json.dumps(data, indent=1))


def section_old(out: Path) -> None:
    data = {"env": env(), "shapes": {}, "tokens": {}}
    data["env"]["copy_gbs"] = copy_gbs()
    log(f"[old] copy {data['env']['copy_gbs']:.0f} GB/s, L2 {L2 / 2**20:.0f} MB")
    for name in SHAPES:
        cps = copies(name)
        row = {"N": SHAPES[name][0], "K": SHAPES[name][1], "bytes": int4_bytes(name), "copies": len(cps)}
        row["read"] = time_read(name, cps)
        for m in MS:
            row[f"fp16_m{m}"] = time_fp16(name, m)
            if m <= 8:
                row[f"old_m{m}"] = time_impl(old_call, name, m, cps)
            elif name in STANDARD:
                row[f"triton_m{m}"] = time_impl(lambda x, p: w4a16_linear(x, p["qweight"], p["scales"], None, 128), name, m, cps)
        data["shapes"][name] = row
        log(f"[old] {name}: read {row['read']['gbs']:.0f} GB/s, old M=1 {row['old_m1']['us']:.2f} us "
            f"({row['old_m1']['gbs']:.0f} GB/s), fp16 M=1 {row['fp16_m1']['us']:.2f} us")
        del cps
        save(out, "old", data)
    for model in TOKENS:
        layers = token_layers(model)
        data["tokens"][model] = {"old": token(model, old_call, layers), "read": token_read(model)}
        del layers
        log(f"[old] token {model}: {data['tokens'][model]}")
        save(out, "old", data)


def key(cfg: tuple[str, float, int]) -> str:
    return f"{cfg[0]}|{cfg[1]}|{cfg[2]}"


def unkey(k: str) -> tuple[str, float, int]:
    v, w, p = k.split("|")
    return v, float(w), int(p)


def plain(res: dict) -> list[str]:
    return [c for c in res if c.endswith("|0")]


def section_new(out: Path) -> None:
    data = {"env": env(), "sweep": {}, "best": {}, "tokens": {}}
    configs = [(v, w, 0) for v in w4a16_cuda.VARIANTS for w in WAVES]
    t0 = time.time()
    # First the whole-token figure with the launcher's defaults (the number that matters, before the long sweep).
    for model in TOKENS:
        layers = token_layers(model)
        rows = {}
        for mode in (0, 2, 6):
            cfg = (w4a16_cuda.DEFAULT_VARIANT, 1.0, mode)
            rows[f"default {key(cfg)}"] = token(model, new_call(cfg), layers)
        data["tokens"][model] = rows
        del layers
        log(f"[new] token {model}: " + ", ".join(f"{k} {v['ms']:.3f} ms" for k, v in rows.items()))
        save(out, "new", data)
    for name in SHAPES:
        cps = copies(name)
        for m in MS:
            res = {}
            for cfg in configs:
                res[key(cfg)] = time_safe(new_call(cfg), name, m, cps)
            best = min(plain(res), key=lambda c: res[c]["us"])
            for mode in MODES:
                res[key(unkey(best)[:2] + (mode,))] = time_safe(new_call(unkey(best)[:2] + (mode,)), name, m, cps)
            data["sweep"][f"{name}|{m}"] = res
            log(f"[new] {name} M={m}: best {best} {res[best]['us']:.2f} us ({res[best]['gbs']:.0f} GB/s), modes "
                + " / ".join(f"{md}: {res[key(unkey(best)[:2] + (md,))]['us']:.2f}" for md in MODES)
                + f" us [{time.time() - t0:.0f} s]")
        del cps
        save(out, "new", data)
    # Fixed config per M: best geometric mean over all shapes.
    for m in MS:
        keys = plain(data["sweep"][f"{next(iter(SHAPES))}|{m}"])
        geo = {c: math.exp(statistics.fmean(math.log(data["sweep"][f"{n}|{m}"][c]["us"]) for n in SHAPES)) for c in keys}
        data["best"][str(m)] = {"config": min(geo, key=geo.get), "geo_us": geo}
    save(out, "new", data)
    best1 = unkey(data["best"]["1"]["config"])
    for model in TOKENS:
        layers = token_layers(model)
        rows = {}
        picks = {nm: min(plain(data["sweep"][f"{nm}|1"]), key=lambda c, nm=nm: data["sweep"][f"{nm}|1"][c]["us"])
                 for nm in TOKENS[model][1]}
        tagged = {nm: [dict(q, name=nm) for q in layers[nm]] for nm in layers}
        for mode in (0,) + MODES:
            cfg = best1[:2] + (mode,)
            rows[f"fixed {key(cfg)}"] = token(model, new_call(cfg), layers)
            fns = {nm: new_call(unkey(picks[nm])[:2] + (mode,)) for nm in picks}
            rows[f"per-shape best, mode {mode}"] = token(model, lambda x, p: fns[p["name"]](x, p), tagged)
        rows["picks"] = picks
        data["tokens"][model].update(rows)
        del layers, tagged
        log(f"[new] token {model}: " + ", ".join(f"{k} {v['ms']:.3f} ms" for k, v in rows.items() if k != "picks"))
        save(out, "new", data)


def env() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sms": props.multi_processor_count, "l2_bytes": L2, "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python3 bench/results/h100/kernels/w4a16_cuda_s4_bench.py $OUT " + " ".join(sys.argv[2:])}


# ------------------------------------------------------------------------------------------------ report
def report(out: Path) -> None:
    old = json.loads((out / "w4a16_cuda_s4_old.json").read_text()) if (out / "w4a16_cuda_s4_old.json").exists() else None
    new = json.loads((out / "w4a16_cuda_s4_new.json").read_text()) if (out / "w4a16_cuda_s4_new.json").exists() else None
    e = (old or new)["env"]
    lines = [f"# W4A16 CUDA GEMV, decode-shaped timing (session 4) on {e['device']}", "",
             f"Commands: `python3 bench/results/h100/kernels/w4a16_cuda_s4_bench.py $OUT old|new|report`; "
             f"old section {old['env']['date'] if old else '-'}, new section {new['env']['date'] if new else '-'}; "
             f"torch {e['torch']}, CUDA {e['cuda']}, {e['sms']} SMs, L2 {e['l2_bytes'] / 2**20:.0f} MB."
             + (f" Copy bandwidth (read + write) {old['env']['copy_gbs']:.0f} GB/s." if old else ""), "",
             "Method: the script's docstring (rotating weight copies > 2.5x L2 in one CUDA graph, >= 120 calls, "
             "back to back). us = per call; GB/s = int4 weights + scales per call / time.", ""]
    if old and new:
        lines += ["## Decode step (M = 1, all GEMVs of one token in one graph)", "",
                  "| model | config | GEMV ms per token | GB/s |", "|---|---|---|---|"]
        for model in TOKENS:
            t = old["tokens"].get(model, {})
            for k, v in [("read reference", t.get("read")), ("old (session 3)", t.get("old"))] + \
                    list(new["tokens"].get(model, {}).items()):
                if v and k != "picks":
                    lines.append(f"| {model} | {k.replace('|', ' ')} | {v['ms']:.3f} | {v['gbs']:.0f} |")
        lines += ["", f"Session-3 e2e profile: {E2E_GEMV_MS} ms of GEMV per Llama-3-8B token.", ""]
        for m in MS:
            b = new["best"].get(str(m), {}).get("config", key((w4a16_cuda.DEFAULT_VARIANT, 1.0, 0)))
            lines += [f"## Per shape, M = {m} (new = fixed config {b.replace('|', ' ')}: variant, waves, mode; best "
                      "geo-mean over the shapes)", "",
                      "| layer | N | K | MB | read us | read GB/s | old us | old GB/s | new us | new GB/s | new % read | "
                      "best us (config) | best in modes 1 / 2 / 4 / 6 us | fp16 us | new vs fp16 | old vs fp16 | rel err |",
                      "|" + "---|" * 17]
            done = [n for n in SHAPES if n in old["shapes"] and f"{n}|{m}" in new["sweep"]]
            for name in done:
                o, s = old["shapes"][name], new["sweep"][f"{name}|{m}"]
                nw = s[b]
                best = min(plain(s), key=lambda c: s[c]["us"])
                bp = [key(unkey(best)[:2] + (p,)) for p in MODES]
                prev = o.get(f"old_m{m}") or o.get(f"triton_m{m}")
                f16 = o[f"fp16_m{m}"]["us"]
                lines.append("| " + " | ".join([
                    name, str(o["N"]), str(o["K"]), f"{o['bytes'] / 1e6:.1f}", f"{o['read']['us']:.2f}",
                    f"{o['read']['gbs']:.0f}", f"{prev['us']:.2f}" if prev else "", f"{prev['gbs']:.0f}" if prev else "",
                    f"{nw['us']:.2f}", f"{nw['gbs']:.0f}", f"{100 * o['read']['us'] / nw['us']:.0f}",
                    f"{s[best]['us']:.2f} ({best.rsplit('|', 1)[0].replace('|', ' waves ')})", " / ".join(f"{s[c]['us']:.2f}" for c in bp if c in s),
                    f"{f16:.2f}", f"{f16 / nw['us']:.2f}x", f"{f16 / prev['us']:.2f}x" if prev else "",
                    f"{nw['rel_err']:.1e}"]) + " |")
            std = [old["shapes"][n][f"fp16_m{m}"]["us"] / new["sweep"][f"{n}|{m}"][b]["us"] for n in STANDARD if n in done]
            prev = [old["shapes"][n][f"fp16_m{m}"]["us"] / (old["shapes"][n].get(f"old_m{m}") or
                                                             old["shapes"][n][f"triton_m{m}"])["us"] for n in STANDARD if n in done]
            if std:
                lines += ["", f"Median over the {len(std)} standard Llama-3 shapes at M = {m}: new {statistics.median(std):.2f}x "
                          f"over fp16, old {statistics.median(prev):.2f}x (old: M <= 8 session-3 GEMV, M = 16 Triton).", ""]
    if old and new:
        lines += shipped(old, new)
    (out / "w4a16_cuda_s4.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def shipped(old: dict, new: dict) -> list[str]:
    """Per shape, the launcher's defaults as committed after this run: kernels/w4a16_cuda.TUNED's (variant, waves,
    cluster) with PDL mode 2, read off the sweep (TUNED was picked from these same numbers: no separate run)."""
    lines = []
    for m, bucket in ((1, 8), (16, 16)):
        lines += [f"## Launcher defaults after this run (TUNED + PDL mode 2), M = {m}", "",
                  "| layer | config | us | GB/s | % read | vs fp16 | old vs fp16 |", "|---|---|---|---|---|---|---|"]
        ratios, prev_ratios = [], []
        for name, (n, k) in SHAPES.items():
            if f"{name}|{m}" not in new["sweep"] or name not in old["shapes"]:
                continue
            v, w, cl = w4a16_cuda.TUNED[(n, k)][bucket]
            r = new["sweep"][f"{name}|{m}"].get(key((v, w, 6 if cl else 2)))
            if r is None:
                continue
            o = old["shapes"][name]
            prev = o.get(f"old_m{m}") or o.get(f"triton_m{m}")
            f16 = o[f"fp16_m{m}"]["us"]
            lines.append(f"| {name} | {v} waves {w}{' cluster' if cl else ''} | {r['us']:.2f} | {r['gbs']:.0f} | "
                         f"{100 * o['read']['us'] / r['us']:.0f} | {f16 / r['us']:.2f}x | "
                         + (f"{f16 / prev['us']:.2f}x |" if prev else " |"))
            if name in STANDARD:
                ratios.append(f16 / r["us"])
                if prev:
                    prev_ratios.append(f16 / prev["us"])
        if ratios:
            lines += ["", f"Median over the {len(ratios)} standard Llama-3 shapes: {statistics.median(ratios):.2f}x over "
                      f"fp16 F.linear (old: {statistics.median(prev_ratios):.2f}x; M = 16 old = Triton).", ""]
    return lines


if __name__ == "__main__":
    OUT = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    section = sys.argv[2]
    if section != "report":
        props = torch.cuda.get_device_properties(0)
        SMS = props.multi_processor_count
        L2 = int(getattr(props, "L2_cache_size", 50 * 2**20))
    {"old": section_old, "new": section_new, "report": report}[section](OUT)
