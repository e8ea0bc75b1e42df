"""Session 6: which SmolLM2 layers does the calibration-only own-codebook criterion mark?

Runs stage._fit_shared_codebooks (as apply_vptq does: after equalisation, diag(H) from the float model on the
C4 calibration windows) with own_codebooks on, and prints each scope's layers ranked by relative distortion
under the shared codebook (ratio to the scope's median). No evaluation text is read. Also prints where
layers.28.mlp.down_proj's input channel 1347 (quiet on C4, loud on WikiText; session5_diagnosis.md) sits in
that layer's diag(H) relative to the median, i.e. what hdiag_floor would do to it.

    OMP_NUM_THREADS=1 python bench/results/cpu/vptq_fit/session6_own_criterion.py [--calib 32x256] [overrides as JSON]
"""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--calib", default="32x256")
p.add_argument("--preset", default="vptq_v8_k4096_r128")
p.add_argument("--over", default='{"own_codebooks": 12, "own_codebook_ratio": 1.0, "kmeans_iters": 10, "kmeans_max_samples": 131072}')
args = p.parse_args()
from calibration.sampling import build_calibration_set, load_documents  # noqa: E402
from compress.model_source import load_model, load_tokenizer, resolve_model  # noqa: E402
from compress.vptq.config import preset  # noqa: E402
from compress.vptq import stage  # noqa: E402
from compress.vptq.equalize import equalize_model  # noqa: E402

t0 = time.time()
cfg = preset(args.preset, **json.loads(args.over))
src = resolve_model(None)
tok = load_tokenizer(src)
model = load_model(src, "cpu", torch.float32).eval()
n, length = (int(v) for v in args.calib.split("x"))
calib = build_calibration_set(load_documents(str(ROOT / ".data/c4_sample_300.jsonl")), tok, n, length, seed=0, layout="stream")
linears = stage.target_linears(model, ["Linear"], ["lm_head"])
_, blocks = stage.decoder_blocks(model, linears)
vlens = {name: stage.vector_len_for(name, m.out_features, cfg) for name, m in linears.items()}
equalize_model(blocks, linears, cfg.equalize)
report = {}
with torch.no_grad():
    stage._fit_shared_codebooks(model, calib.samples, linears, vlens, cfg, torch.device("cpu"), None, report)
print(f"[{time.time() - t0:.0f}s] own: {report['own']}")
for t in ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]:
    r = sorted(((v, k) for k, v in report["distortion"].items() if k.endswith(t)), reverse=True)
    print(t.ljust(10), " ".join(f"{k.split('.')[2]}:{v:.2f}" for v, k in r[:6]), "| min", f"{r[-1][0]:.2f}")
# channel 1347 of layers.28.mlp.down_proj in the equalised diag(H)
acc = {}
lin = linears["model.layers.28.mlp.down_proj"]
h = lin.register_forward_pre_hook(lambda m, a: acc.update(s=acc.get("s", 0) + a[0].reshape(-1, a[0].shape[-1]).pow(2).sum(0)))
with torch.no_grad():
    for b in calib.samples:
        model(**b, use_cache=False)
h.remove()
d = acc["s"]
med = d.median()
print("layers.28.down diag(H)/median: ch1347", f"{float(d[1347] / med):.3f}", "ch193", f"{float(d[193] / med):.3f}",
      "ch805", f"{float(d[805] / med):.3f}", "| quantiles 1/5/25%", [f"{float(d.quantile(q) / med):.3f}" for q in (0.01, 0.05, 0.25)],
      "| max", f"{float(d.max() / med):.1f}")
Path(ROOT / "bench/results/cpu/vptq_fit/session6_own_criterion.json").write_text(json.dumps(report, indent=1))
