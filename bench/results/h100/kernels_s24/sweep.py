"""Session 24: the W8A16 2:4 GEMV on the sparse tensor cores (kernels/sp24_w16_gemv.py) against the Triton GEMV the
runtime served at one token (kernels/sparse24.py `sparse24_w8a16_linear`) and the runtime's dense W8A16 layer, on the
8 Llama-3 layer shapes, by the kernel table's rotate timing (compress.bench.kernel_timing.checked_call_us: checked
against the reference and for the same bytes on a second call first).

Arms: build variants (warps x chunks in flight) x waves (CTAs launched / CTAs resident), PDL early (2). M from the
command line (default 1). Call 3 also timed each arm with each tile's chunks in a rotated order (a launch flag since
removed): no arm moved by more than 1%.

Usage (repository root, GPU machine): python3 bench/results/h100/kernels_s24/sweep.py OUT_JSON [M ...]
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch


# Arms (environment): SWEEP_VARIANTS (default every build), SWEEP_WAVES (default 1,2).
VARIANTS = os.environ.get("SWEEP_VARIANTS", "w8d2,w8d3,w8d4,w8k8d2,w8k4d2,w4k4d2").split(",")
WAVES = tuple(float(w) for w in os.environ.get("SWEEP_WAVES", "1,2").split(","))


def main():
    out_json = sys.argv[1]
    ms = [int(a) for a in sys.argv[2:]] or [1]
    from compress.bench.kernel_suites import _sparse24_layer, w8a16_dense
    from compress.runtime.paths import PathTable
    from compress.bench.kernel_timing import checked_call_us
    from kernels import sp24_w16_gemv as spw
    from kernels import sparse24 as sp
    from kernels.cases import LLAMA_SHAPES, make_sparse24

    t0 = time.time()
    rows = []
    for m in ms:
        for name, n, k in LLAMA_SHAPES:
            q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
            q["meta_frag_w16"] = spw.pack_meta_fragments(q["meta"], n, k)
            x = torch.randn(m, k, device="cuda").half()
            want = sp.sparse24_w8a16_linear_ref(x, q["values"], q["meta"], q["w_scale"])
            arms = {"triton w16": checked_call_us(
                lambda w: sp.sparse24_w8a16_linear(x, w["values"], w["meta"], w["w_scale"]), q, want)}
            for var in VARIANTS:
                for waves in WAVES:
                    arms[f"sp {var} waves{waves}"] = checked_call_us(
                        lambda w, var=var, waves=waves: spw.launch(
                            x, w["values"], w["meta_frag_w16"], w["w_scale"], name=var, waves=waves), q, want)
            # The runtime's PathTable over the W8A16 2:4 layer's paths (every build offered): its cold single-call
            # timings (us), which decide what the runtime serves.
            os.environ["COMPRESS_SP24_W16_VARIANTS"] = ",".join(VARIANTS)
            layer = _sparse24_layer(n, k, "compressed-tensors.w8a16")(q)
            table = PathTable()
            table.run(("s",), layer.kernel_paths(x), x.device)
            pathtable = {key: v for key, v in table.timings.get(("s",), {}).items()}
            del q, layer
            d = w8a16_dense(n, k, m, "rotate")  # the runtime's dense W8A16 layer (its PathTable's pick), as the table
            arms[f"dense w8a16 ({d['path']})"] = {"us": 1000 * d["ms"]}
            best = min((a for a in arms if a.startswith("sp ")), key=lambda a: arms[a]["us"])
            row = {"layer": name, "N": n, "K": k, "M": m, "arms": arms, "best": best, "pathtable_us": pathtable,
                   "pathtable_pick": table.choice.get(("s",))}
            rows.append(row)
            tri, bu = arms["triton w16"]["us"], arms[best]["us"]
            dense = [v["us"] for a, v in arms.items() if a.startswith("dense")][0]
            print(f"{name:18s} M={m} triton {tri:7.2f} us | best {best:28s} {bu:7.2f} us | dense {dense:7.2f} us | "
                  f"vs dense: triton {dense / tri:.2f}x, sp {dense / bu:.2f}x  [{time.time() - t0:.0f} s]", flush=True)
            print(f"    pathtable (cold single calls, us) picks {row['pathtable_pick']}: "
                  + ", ".join(f"{key.replace('cuda_sp24_w16_', '')}={v:.1f}" if isinstance(v, float) else f"{key}={v}"
                             for key, v in pathtable.items()), flush=True)
            json.dump(rows, open(out_json, "w"), indent=1)
    for m in ms:
        sel = [r for r in rows if r["M"] == m]
        import statistics

        dense = lambda r: [v["us"] for a, v in r["arms"].items() if a.startswith("dense")][0]  # noqa: E731
        print(f"M={m}: median over dense: triton {statistics.median(dense(r) / r['arms']['triton w16']['us'] for r in sel):.3f}x"
              f", sp best-per-shape {statistics.median(dense(r) / r['arms'][r['best']]['us'] for r in sel):.3f}x")
        for a in [a for a in sel[0]["arms"] if a.startswith("sp ")]:
            print(f"  {a:28s} {statistics.median(dense(r) / r['arms'][a]['us'] for r in sel):.3f}x")


if __name__ == "__main__":
    main()
