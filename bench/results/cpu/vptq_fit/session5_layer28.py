"""layers.28.mlp.down_proj alone (rest of the model float): held-out relative output error of its VPTQ fit
(r128 preset, codebook from this layer only, cheap k-means) vs dampening and row gain. Same protocol as diag_blocks."""
import copy, sys, torch
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/bench/results/cpu/vptq_fit")
from pathlib import Path
from calibration.sampling import build_calibration_set, load_documents
from compress.model_source import load_model, load_tokenizer, resolve_model
from compress.vptq import VPTQModifierConfig, apply_vptq
from compress.vptq.equalize import equalize_model
from compress.vptq.stage import decoder_blocks, target_linears
from eval.perplexity import tokenize_eval_text
from diag_blocks import measure
src = resolve_model(None); tok = load_tokenizer(src); base = load_model(src, "cpu", torch.float32).eval()
calib = build_calibration_set(load_documents("/work/main/.data/c4_sample_300.jsonl"), tok, 32, 256, seed=0, layout="stream")
probe = tokenize_eval_text(Path("/work/main/.data/wikitext2_raw_test.txt").read_text(), tok)[-2048:]
RE = "re:model\\.layers\\.28\\.mlp\\.down_proj"
for over in [dict(), dict(row_gain="norm"), dict(damp=0.1), dict(damp=1.0)]:
    tm = copy.deepcopy(base); tl = target_linears(tm, [RE], ["lm_head"]); equalize_model(decoder_blocks(tm, tl)[1], tl, 1.0)
    teacher = {n: m.weight.detach().clone() for n, m in tl.items()}
    m = copy.deepcopy(base)
    r = apply_vptq(m, calib.samples, VPTQModifierConfig(preset="vptq_v8_k4096_r128", targets=[RE], kmeans_iters=10, kmeans_max_samples=2**17, **over), device="cpu")
    layer, _, _ = measure(m, teacher, base, probe, list(tl))
    (n, x), = layer.items()
    print(f"{over}: calibration proxy {r.stats[n]['proxy_loss']:.4f}  held-out rel_err {x['rel_err']:.4f} gain {x['gain']:.3f}", flush=True)
