# Input second moments of layers.28.mlp.down_proj (float model): C4 calibration windows vs the held-out WikiText probe.
import sys, torch
sys.path.insert(0, "/work/main")
from pathlib import Path
from calibration.sampling import build_calibration_set, load_documents
from compress.model_source import load_model, load_tokenizer, resolve_model
from eval.perplexity import tokenize_eval_text
src = resolve_model(None); tok = load_tokenizer(src); m = load_model(src, "cpu", torch.float32).eval()
calib = build_calibration_set(load_documents("/work/main/.data/c4_sample_300.jsonl"), tok, 32, 256, seed=0, layout="stream")
ids = tokenize_eval_text(Path("/work/main/.data/wikitext2_raw_test.txt").read_text(), tok)
acc = {}
def hook(mod, args):
    x = args[0].reshape(-1, args[0].shape[-1]); acc["s"] = acc.get("s", 0) + x.pow(2).sum(0); acc["n"] = acc.get("n", 0) + x.shape[0]; acc["max"] = torch.maximum(acc.get("max", torch.zeros(x.shape[1])), x.abs().amax(0))
h = m.model.layers[28].mlp.down_proj.register_forward_pre_hook(hook)
with torch.no_grad():
    for b in calib.samples: m(**b, use_cache=False)
    c = (acc["s"] / acc["n"], acc["max"]); acc.clear()
    m(ids[-2048:][None], use_cache=False)
    p = (acc["s"] / acc["n"], acc["max"])
h.remove()
ratio = p[0] / c[0].clamp_min(1e-12)
top = ratio.topk(8)
print("channels with the largest probe/calibration mean-square ratio:")
for r, j in zip(top.values, top.indices):
    print(f"  ch {int(j):5d} calib ms {float(c[0][j]):.3e} max {float(c[1][j]):.2f} | probe ms {float(p[0][j]):.3e} max {float(p[1][j]):.2f} | ratio {float(r):.1f}")
print("top-5 channels by probe mean square:", [(int(j), f"{float(p[0][j]):.2e}", f"calib {float(c[0][j]):.2e}") for j in p[0].topk(5).indices])
print("total energy ratio probe/calib:", float(p[0].sum() / c[0].sum()))
