"""Session 3's script, for the kernel as of commit 4f538cc (its build variants, `plan` and defaults); it does not
run against the session-4 kernels/w4a16_cuda.py: use w4a16_cuda_s4_bench.py (see w4a16_cuda_s4_notes.md).

W4A16 decode timings for the CUDA C++ GEMV (kernels/w4a16_cuda.py) against torch fp16 F.linear and the Triton
launcher (kernels/w4a16.py) on Llama-3-8B / 70B layer shapes, M = 1, 2, 4, 8, 16. Run on the GPU from the repo root:

    python3 bench/results/h100/kernels/w4a16_cuda_bench.py OUT_DIR

Sections (each rewrites OUT_DIR/w4a16_cuda.{json,md}):
1. sweep of the GEMV's build variants x split-K waves at M = 1, 4, 8 over all shapes; the best fixed config per M
   by geometric-mean time is "tuned" below;
2. the main table: fp16, Triton, CUDA GEMV with the code's defaults and with the tuned config, timed two ways:
   - "flushed" = compress.bench.kernel_timing.time_ms, the method of `compress bench kernels` (CUDA-graph replay,
     triton do_bench: the L2 is flushed by writing 256 MB before every repetition, CUDA events, median);
   - "clean" = the same replay after a 256 MB *read* (torch.sum): the L2 then holds clean lines, as between two
     layers of a real decode step, where nothing written has to go back to DRAM during the call;
   plus a read-bandwidth reference per shape: torch.sum over as many bytes as the int4 layer, both ways;
3. group 64 / asymmetric / bf16 instances on two shapes.
GB/s counts weights + scales + activations in + outputs out once; "% copy" compares with the device-to-device copy
bandwidth measured in the same run.
"""

from __future__ import annotations

import json
import math
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
SWEEP_MS = [1, 4, 8]
WAVES = [1.0, 2.0]
_FLUSH: list[torch.Tensor] = []


def time_clean_ms(fn, reps: int = 60) -> float:
    """Median ms of a CUDA-graph replay of fn() after a 256 MB read (L2 left holding clean lines)."""
    if not _FLUSH:
        _FLUSH.append(torch.ones(64 * 2**20, dtype=torch.float32, device="cuda"))
    buf = _FLUSH[0]
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(5):
        buf.sum()
        g.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        buf.sum()
        start.record()
        g.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def rel_err(a, b) -> float:
    return float(((a.float() - b.float()).norm() / b.float().norm()).item())


def nbytes(p: dict, m: int, n: int, k: int) -> int:
    meta = sum(t.numel() * t.element_size() for t in (p["scales"], p["zeros"]) if t is not None)
    return p["qweight"].numel() * 4 + meta + 2 * m * (k + n)


def geo(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def bucket(m: int) -> int:
    return min(b for b in SWEEP_MS if m <= b) if m <= max(SWEEP_MS) else max(SWEEP_MS)


def _f(v, fmt):
    return "" if v is None else format(v, fmt)


def main_table(rows: list[dict], copy_gbs: float) -> str:
    head = ["layer", "N", "K", "M", "fp16", "Triton", "CUDA default", "CUDA tuned", "ours", "ours vs fp16",
            "CUDA tuned GB/s", "% copy", "clean: fp16", "clean: Triton", "clean: CUDA tuned", "clean: ours vs fp16",
            "clean: CUDA GB/s", "rel err", "tuned config"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join([
            r["layer"], str(r["N"]), str(r["K"]), str(r["M"]), _f(r["torch_ms"], ".4f"), _f(r["triton_ms"], ".4f"),
            _f(r["cuda_ms"], ".4f"), _f(r["tuned_ms"], ".4f"), _f(r["ours_ms"], ".4f"), _f(r["speedup"], ".2f") + "x",
            _f(r["tuned_gbs"], ".0f"), _f(r["tuned_gbs"] and 100 * r["tuned_gbs"] / copy_gbs, ".0f"),
            _f(r["clean_torch_ms"], ".4f"), _f(r["clean_triton_ms"], ".4f"), _f(r["clean_tuned_ms"], ".4f"),
            _f(r["clean_speedup"], ".2f") + "x", _f(r["clean_tuned_gbs"], ".0f"), _f(r["rel_err"], ".1e"),
            r.get("tuned", "")]) + " |")
    return "\n".join(out)


def write(out: Path, report: dict) -> None:
    (out / "w4a16_cuda.json").write_text(json.dumps(report, indent=1))
    env, rows = report["env"], report["rows"]
    parts = [f"# W4A16 CUDA GEMV on {env['device']}", "",
             f"Command: `{env['command']}`  ",
             f"Date: {env['date']}; torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['sms']} SMs.  ",
             f"Measured device-to-device copy bandwidth: {env['copy_gbs']:.0f} GB/s (bytes read + written).  ",
             "Times in ms. 'flushed' columns: compress.bench.kernel_timing.time_ms (the kernels table's method: L2 "
             "flushed by a 256 MB write before every repetition); 'clean:' columns: the same graph replay after a 256 MB "
             "read (see the script's docstring). Weights: round-to-nearest int4, group 128, symmetric, fp16 activations. "
             "CUDA default = the launcher's built-in config for that M; CUDA tuned = the sweep's best fixed config for "
             "that M bucket (section 1). ours = the faster of Triton and CUDA tuned (CUDA covers M <= 8). GB/s: weights + "
             "scales + activations + outputs.", ""]
    if report.get("tuned"):
        parts.append("Tuned configs (variant, waves) per M bucket: " + ", ".join(
            f"M<={b}: {v} waves {w:g} (geo-mean {t * 1e3:.1f} us; default {d * 1e3:.1f} us)"
            for b, (v, w, t, d) in sorted(report["tuned"].items(), key=lambda kv: int(kv[0]))) + "  ")
    if rows:
        for std, label in ((True, "the 8 standard Llama-3 shapes of the kernels table"), (False, "all 10 shapes here")):
            sel = [r for r in rows if r["layer"] in STANDARD or not std]
            for key, what in (("speedup", "flushed"), ("clean_speedup", "clean")):
                med = {m: statistics.median(r[key] for r in sel if r["M"] == m) for m in MS if any(r["M"] == m for r in sel)}
                parts.append(f"Median speedup of ours over fp16 ({what}), {label}: " +
                             ", ".join(f"M={m}: {v:.2f}x" for m, v in med.items()) + "  ")
        parts += ["", main_table(rows, env["copy_gbs"])]
    if report.get("readbw"):
        parts += ["", "## Read-bandwidth reference: torch.sum over as many bytes as the int4 layer", "",
                  "| layer | MB | flushed (ms) | flushed GB/s | clean (ms) | clean GB/s |", "|---|---|---|---|---|---|"]
        for r in report["readbw"]:
            parts.append(f"| {r['layer']} | {r['mb']:.1f} | {r['ms']:.4f} | {r['gbs']:.0f} | {r['clean_ms']:.4f} | "
                         f"{r['clean_gbs']:.0f} |")
    if report.get("variants"):
        parts += ["", "## Group 64 / asymmetric / bf16 (flushed timing, default config)", "",
                  "| layer | M | fp16 | Triton | CUDA | CUDA vs fp16 | CUDA GB/s | rel err |", "|---|---|---|---|---|---|---|---|"]
        for r in report["variants"]:
            parts.append(f"| {r['layer']} | {r['M']} | {r['torch_ms']:.4f} | {r['triton_ms']:.4f} | {r['cuda_ms']:.4f} | "
                         f"{r['torch_ms'] / r['cuda_ms']:.2f}x | {r['cuda_gbs']:.0f} | {r['rel_err']:.1e} |")
    if report.get("sweep"):
        parts += ["", "## Sweep: CUDA GEMV build variant x split-K waves (flushed timing)", "",
                  "| layer | M | best (ms) | best config | all (config: ms) |", "|---|---|---|---|---|"]
        for s in report["sweep"]:
            allc = ", ".join(f"{c}: {t:.4f}" for c, t in sorted(s["times"].items(), key=lambda kv: kv[1]))
            parts.append(f"| {s['layer']} | {s['M']} | {s['best_ms']:.4f} | {s['best']} | {allc} |")
    (out / "w4a16_cuda.md").write_text("\n".join(parts) + "\n")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = device_description()
    env["copy_gbs"] = copy_bandwidth_gbs()
    env["command"] = "python3 " + " ".join(sys.argv)
    env["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    report = {"env": env, "tuned": {}, "rows": [], "readbw": [], "variants": [], "sweep": []}
    print(f"[w4a16_cuda] {env['device']}, copy {env['copy_gbs']:.0f} GB/s", flush=True)
    t0 = time.time()
    # Smoke check of the kernels table's W4A16 code path (compress bench kernels), which times both of our paths.
    from compress.bench.kernel_suites import _ours_w4a16

    p = make_int4(4096, 4096, 128, True, torch.float16, "cuda", seed=1)
    for m in (1, 16):
        x = torch.randn(m, 4096, device="cuda").half()
        o = _ours_w4a16(x, p, 128, w4a16_linear_ref(x, p["qweight"], p["scales"]))
        print(f"[w4a16_cuda] smoke kernels-table path M={m}: {o}", flush=True)

    layers = {name: make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k) for name, n, k in SHAPES}

    # 1. Sweep.
    for name, n, k in SHAPES:
        p = layers[name]
        for m in SWEEP_MS:
            x = torch.randn(m, k, device="cuda").half()
            times = {}
            for vname in w4a16_cuda.VARIANTS:
                for waves in WAVES:
                    fn = lambda: w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name=vname, waves=waves)  # noqa: E731
                    times[f"{vname} waves{waves:g}"] = time_ms(fn)
            times["default"] = time_ms(lambda: w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128))
            best = min(times, key=times.get)
            report["sweep"].append({"layer": name, "N": n, "K": k, "M": m, "times": times, "best": best,
                                    "best_ms": times[best]})
        print(f"[sweep] {name} done {time.time() - t0:.0f} s", flush=True)
    for m in SWEEP_MS:
        sw = [s for s in report["sweep"] if s["M"] == m]
        scores = {c: geo(s["times"][c] for s in sw) for c in sw[0]["times"] if c != "default"}
        best = min(scores, key=scores.get)
        vname, waves = best.split(" waves")
        report["tuned"][str(m)] = (vname, float(waves), scores[best], geo(s["times"]["default"] for s in sw))
    print(f"[w4a16_cuda] tuned {report['tuned']}", flush=True)
    write(out, report)

    # 2. Main table, both timing methods; read-bandwidth reference and the methods' floor (a 1-element kernel).
    tiny = torch.zeros(1, device="cuda")
    report["readbw"].append({"layer": "floor: one 1-element kernel", "mb": 0.0, "ms": time_ms(lambda: tiny.add_(1)),
                             "gbs": 0.0, "clean_ms": time_clean_ms(lambda: tiny.add_(1)), "clean_gbs": 0.0})
    for name, n, k in SHAPES:
        p = layers[name]
        w = (torch.randn(n, k, device="cuda") / k**0.5).half()
        ref = torch.empty(nbytes(p, 0, n, k) // 2, dtype=torch.float16, device="cuda").fill_(1.0)
        rms, rclean = time_ms(lambda: ref.sum()), time_clean_ms(lambda: ref.sum())
        mb = ref.numel() * 2 / 1e6
        report["readbw"].append({"layer": name, "mb": mb, "ms": rms, "gbs": mb / rms, "clean_ms": rclean, "clean_gbs": mb / rclean})
        del ref
        for m in MS:
            x = torch.randn(m, k, device="cuda").half()
            args = (x, p["qweight"], p["scales"], None, 128)
            row = {"layer": name, "N": n, "K": k, "M": m, "triton_path": _path(_config(m, n)), "cuda_ms": None,
                   "tuned_ms": None, "tuned_gbs": None, "clean_tuned_ms": None, "clean_tuned_gbs": None, "rel_err": None}
            row["torch_ms"] = time_ms(lambda: F.linear(x, w))
            row["triton_ms"] = time_ms(lambda: w4a16_linear(*args))
            row["clean_torch_ms"] = time_clean_ms(lambda: F.linear(x, w))
            row["clean_triton_ms"] = time_clean_ms(lambda: w4a16_linear(*args))
            if m <= w4a16_cuda.MAX_M:
                vname, waves = report["tuned"][str(bucket(m))][:2]
                tuned = lambda: w4a16_cuda._launch(*args, name=vname, waves=waves)  # noqa: E731
                want = w4a16_linear_ref(*args)
                row["rel_err"] = max(rel_err(w4a16_cuda.w4a16_gemv(*args), want), rel_err(tuned(), want))
                row["cuda_ms"] = time_ms(lambda: w4a16_cuda.w4a16_gemv(*args))
                row["tuned_ms"] = time_ms(tuned)
                row["clean_tuned_ms"] = time_clean_ms(tuned)
                row["tuned"] = f"{vname} waves {waves:g}"
                b = nbytes(p, m, n, k)
                row["tuned_gbs"] = b / (row["tuned_ms"] * 1e-3) / 1e9
                row["clean_tuned_gbs"] = b / (row["clean_tuned_ms"] * 1e-3) / 1e9
            row["ours_ms"] = min(row["triton_ms"], row["tuned_ms"] or math.inf)
            row["speedup"] = row["torch_ms"] / row["ours_ms"]
            row["clean_speedup"] = row["clean_torch_ms"] / min(row["clean_triton_ms"], row["clean_tuned_ms"] or math.inf)
            report["rows"].append(row)
        write(out, report)
        del w
        print(f"[main] {name} done {time.time() - t0:.0f} s", flush=True)

    # 3. Group 64 / asymmetric / bf16 on two shapes (the GEMV's other template instances), default config.
    for name, n, k in [SHAPES[0], SHAPES[5]]:
        for gs, sym, dtype in ((64, True, torch.float16), (128, False, torch.float16), (64, False, torch.bfloat16),
                               (128, True, torch.bfloat16)):
            p = make_int4(n, k, gs, sym, dtype, "cuda", seed=gs)
            w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
            for m in (1, 8):
                x = torch.randn(m, k, device="cuda").to(dtype)
                args = (x, p["qweight"], p["scales"], p["zeros"], gs)
                cuda = time_ms(lambda: w4a16_cuda.w4a16_gemv(*args))
                report["variants"].append({
                    "layer": f"{name} [g{gs} {'sym' if sym else 'asym'} {str(dtype)[6:]}]", "N": n, "K": k, "M": m,
                    "torch_ms": time_ms(lambda: F.linear(x, w)), "triton_ms": time_ms(lambda: w4a16_linear(*args)),
                    "cuda_ms": cuda, "cuda_gbs": nbytes(p, m, n, k) / (cuda * 1e-3) / 1e9,
                    "rel_err": rel_err(w4a16_cuda.w4a16_gemv(*args), w4a16_linear_ref(*args))})
            del w
    write(out, report)
    print(f"[w4a16_cuda] done {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "w4a16_cuda_out"))
