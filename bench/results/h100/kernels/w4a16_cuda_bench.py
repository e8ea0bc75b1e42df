"""W4A16 decode timings for the CUDA C++ GEMV (kernels/w4a16_cuda.py) against torch fp16 F.linear and the Triton
launcher (kernels/w4a16.py) on Llama-3-8B / 70B layer shapes, M = 1, 2, 4, 8, 16; plus a sweep of the GEMV's
build variants and split-K plans. Run on the GPU from the repo root:

    python3 bench/results/h100/kernels/w4a16_cuda_bench.py OUT_DIR

Timing: compress.bench.kernel_timing.time_ms (CUDA-graph replay of one call, L2 flushed before every
repetition, CUDA events, median), the same helper as `compress bench kernels`. GB/s counts weights + scales +
activations in + outputs out once; "% copy" compares with the device-to-device copy bandwidth measured in the
same run. Writes w4a16_cuda.json and w4a16_cuda.md to OUT_DIR after every section.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from compress.bench.kernel_suites import _path
from compress.bench.kernel_timing import copy_bandwidth_gbs, device_description, time_ms
from kernels import w4a16_cuda
from kernels.cases import LLAMA_SHAPES, make_int4
from kernels.w4a16 import _config, w4a16_linear, w4a16_linear_ref

# (layer, N, K): the 8 shapes of the kernels table plus the fused projections the runtime builds.
SHAPES = LLAMA_SHAPES[:3] + [("8B qkv fused", 6144, 4096), ("8B gate+up fused", 28672, 4096)] + LLAMA_SHAPES[3:]
STANDARD = {name for name, _, _ in LLAMA_SHAPES}
MS = [1, 2, 4, 8, 16]


def rel_err(a, b) -> float:
    return float(((a.float() - b.float()).norm() / b.float().norm()).item())


def nbytes(p: dict, m: int, n: int, k: int) -> int:
    meta = sum(t.numel() * t.element_size() for t in (p["scales"], p["zeros"]) if t is not None)
    return p["qweight"].numel() * 4 + meta + 2 * m * (k + n)


def table(rows: list[dict], copy_gbs: float) -> str:
    head = ["layer", "N", "K", "M", "torch fp16 (ms)", "Triton (ms)", "CUDA GEMV (ms)", "ours (ms)", "ours vs fp16",
            "CUDA vs fp16", "CUDA GB/s", "% copy BW", "rel err", "CUDA plan"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        c = r["cuda_ms"]
        out.append("| " + " | ".join([
            r["layer"], str(r["N"]), str(r["K"]), str(r["M"]), f"{r['torch_ms']:.4f}", f"{r['triton_ms']:.4f}",
            f"{c:.4f}" if c else "", f"{r['ours_ms']:.4f}", f"{r['speedup']:.2f}x",
            f"{r['torch_ms'] / c:.2f}x" if c else "", f"{r['cuda_gbs']:.0f}" if c else "",
            f"{100 * r['cuda_gbs'] / copy_gbs:.0f}" if c else "", f"{r['rel_err']:.1e}" if r.get("rel_err") is not None else "",
            r.get("plan", "")]) + " |")
    return "\n".join(out)


def medians(rows: list[dict], only_standard: bool) -> dict[int, float]:
    sel = [r for r in rows if r["layer"] in STANDARD or not only_standard]
    return {m: statistics.median(r["speedup"] for r in sel if r["M"] == m) for m in sorted({r["M"] for r in sel})}


def write(out: Path, report: dict) -> None:
    (out / "w4a16_cuda.json").write_text(json.dumps(report, indent=1))
    env, rows = report["env"], report["rows"]
    parts = [f"# W4A16 CUDA GEMV on {env['device']}", "",
             f"Command: `{env['command']}`  ",
             f"Date: {env['date']}; torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['sms']} SMs.  ",
             f"Measured device-to-device copy bandwidth: {env['copy_gbs']:.0f} GB/s (bytes read + written).  ",
             "Timing: CUDA-graph replay of one call, L2 flushed before every repetition, CUDA events, median "
             "(compress.bench.kernel_timing.time_ms); all columns from this run. Weights: round-to-nearest int4, "
             "group 128, symmetric, fp16 activations unless marked. ours = the faster of Triton and the CUDA GEMV "
             "(the CUDA GEMV covers M <= 8). GB/s: weights + scales + activations + outputs.", ""]
    if rows:
        for std, label in ((True, "the 8 standard Llama-3 shapes of the kernels table"), (False, "all shapes here")):
            med = medians(rows, std)
            parts.append(f"Median speedup of ours over fp16, {label}: " +
                         ", ".join(f"M={m}: {v:.2f}x" for m, v in med.items()) + "  ")
        parts += ["", table(rows, env["copy_gbs"])]
    if report.get("variants"):
        parts += ["", "## Other variants (M = 1 and 8)", "", table(report["variants"], env["copy_gbs"])]
    if report.get("sweep"):
        parts += ["", "## Sweep of the CUDA GEMV's build variant x split-K waves (best per shape and M)", "",
                  "| layer | M | default (ms) | best (ms) | best config | all (config: ms) |", "|---|---|---|---|---|---|"]
        for s in report["sweep"]:
            allc = ", ".join(f"{c}: {t:.4f}" for c, t in sorted(s["times"].items(), key=lambda kv: kv[1]))
            parts.append(f"| {s['layer']} | {s['M']} | {s['default_ms']:.4f} | {s['best_ms']:.4f} | {s['best']} | {allc} |")
    (out / "w4a16_cuda.md").write_text("\n".join(parts) + "\n")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = device_description()
    env["copy_gbs"] = copy_bandwidth_gbs()
    env["command"] = "python3 " + " ".join(sys.argv)
    env["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    report = {"env": env, "rows": [], "variants": [], "sweep": []}
    print(f"[w4a16_cuda] {env['device']}, copy {env['copy_gbs']:.0f} GB/s", flush=True)
    t0 = time.time()
    # Smoke check of the kernels table's W4A16 code path (compress bench kernels), which now times both of our paths.
    from compress.bench.kernel_suites import _ours_w4a16

    p = make_int4(4096, 4096, 128, True, torch.float16, "cuda", seed=1)
    for m in (1, 16):
        x = torch.randn(m, 4096, device="cuda").half()
        o = _ours_w4a16(x, p, 128, w4a16_linear_ref(x, p["qweight"], p["scales"]))
        print(f"[w4a16_cuda] smoke kernels-table path M={m}: {o}", flush=True)
    layers = {}
    for name, n, k in SHAPES:
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
        w = (torch.randn(n, k, device="cuda") / k**0.5).half()
        layers[name] = (p, w)
        for m in MS:
            x = torch.randn(m, k, device="cuda").half()
            args = (x, p["qweight"], p["scales"], None, 128)
            ref_ms = time_ms(lambda: F.linear(x, w))
            tri = time_ms(lambda: w4a16_linear(*args))
            cuda, err, plan = None, None, ""
            if m <= w4a16_cuda.MAX_M:
                want = w4a16_linear_ref(*args)
                err = rel_err(w4a16_cuda.w4a16_gemv(*args), want)
                cuda = time_ms(lambda: w4a16_cuda.w4a16_gemv(*args))
                plan = w4a16_cuda.planned(n, k, m)
            ours = min(tri, cuda) if cuda else tri
            row = {"layer": name, "N": n, "K": k, "M": m, "torch_ms": ref_ms, "triton_ms": tri, "cuda_ms": cuda,
                   "ours_ms": ours, "speedup": ref_ms / ours, "rel_err": err, "triton_path": _path(_config(m, n)),
                   "plan": plan, "cuda_gbs": nbytes(p, m, n, k) / (cuda * 1e-3) / 1e9 if cuda else None}
            report["rows"].append(row)
            print(f"[w4a16_cuda] {name} M={m}: fp16 {ref_ms:.4f} triton {tri:.4f} cuda "
                  f"{'' if cuda is None else f'{cuda:.4f}'} err {err}", flush=True)
        write(out, report)
        del w
    print(f"[w4a16_cuda] main table {time.time() - t0:.0f} s", flush=True)

    # Group 64 / asymmetric / bf16 on two shapes (the GEMV's other template instances).
    for name, n, k in [SHAPES[0], SHAPES[5]]:
        for gs, sym, dtype in ((64, True, torch.float16), (128, False, torch.float16), (64, False, torch.bfloat16),
                               (128, True, torch.bfloat16)):
            p = make_int4(n, k, gs, sym, dtype, "cuda", seed=gs)
            w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
            for m in (1, 8):
                x = torch.randn(m, k, device="cuda").to(dtype)
                args = (x, p["qweight"], p["scales"], p["zeros"], gs)
                ref_ms = time_ms(lambda: F.linear(x, w))
                tri = time_ms(lambda: w4a16_linear(*args))
                err = rel_err(w4a16_cuda.w4a16_gemv(*args), w4a16_linear_ref(*args))
                cuda = time_ms(lambda: w4a16_cuda.w4a16_gemv(*args))
                label = f"{name} [g{gs} {'sym' if sym else 'asym'} {str(dtype)[6:]}]"
                report["variants"].append({"layer": label, "N": n, "K": k, "M": m, "torch_ms": ref_ms, "triton_ms": tri,
                                           "cuda_ms": cuda, "ours_ms": min(tri, cuda), "speedup": ref_ms / min(tri, cuda),
                                           "rel_err": err, "plan": w4a16_cuda.planned(n, k, m),
                                           "cuda_gbs": nbytes(p, m, n, k) / (cuda * 1e-3) / 1e9})
            del w
    write(out, report)
    print(f"[w4a16_cuda] variants done {time.time() - t0:.0f} s", flush=True)

    # Sweep: build variant x waves (split-K target), M = 1 and 8.
    for name, n, k in SHAPES:
        p, _ = layers[name]
        for m in (1, 8):
            x = torch.randn(m, k, device="cuda").half()
            times = {}
            for vname in w4a16_cuda.VARIANTS:
                for waves in (1.0, 2.0, 4.0):
                    fn = lambda: w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=vname, waves=waves)  # noqa: E731
                    times[f"{vname} waves{waves:g}"] = time_ms(fn)
            best = min(times, key=times.get)
            default = times[f"{w4a16_cuda.DEFAULT_VARIANT} waves{w4a16_cuda.WAVES:g}"]
            report["sweep"].append({"layer": name, "N": n, "K": k, "M": m, "times": times, "best": best,
                                    "best_ms": times[best], "default_ms": default})
            print(f"[sweep] {name} M={m}: best {best} {times[best]:.4f} default {default:.4f}", flush=True)
        write(out, report)
    print(f"[w4a16_cuda] done {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "w4a16_cuda_out"))
