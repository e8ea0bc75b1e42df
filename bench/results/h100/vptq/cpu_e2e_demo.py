"""CPU demo: does end-to-end distillation close VPTQ's gap to GPTQ-3? Blocks 0-3 of SmolLM2 only."""
import copy, time, sys, json
sys.path.insert(0, "/work/main")
import torch
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM, AutoTokenizer
from calibration.sampling import build_calibration_set, load_documents
from eval.perplexity import tokenize_eval_text, perplexity
from compress.vptq import VPTQModifierConfig, apply_vptq
from compress.vptq.stage import target_linears, decoder_blocks
from compress.vptq.equalize import equalize_model
from compress.vptq.finetune import finetune_codebooks
T0 = time.time()
def log(*a): print(f"[{time.time()-T0:6.0f}s]", *a, flush=True)
tok = AutoTokenizer.from_pretrained("/tmp/smollm2")
base = AutoModelForCausalLM.from_pretrained("/tmp/smollm2", dtype=torch.float32).eval()
calib = build_calibration_set(load_documents("/work/main/.vptq_data/c4_sample_300.jsonl"), tok, 32, 256, seed=0, layout="stream")
ids = tokenize_eval_text(open("/work/main/.vptq_data/wikitext2_raw_test.txt").read(), tok)
W = 3
def ppl(m): return perplexity(m, ids, 2048, W).ppl
RE = "re:model\\.layers\\.[0-3]\\..*"
log("base", ppl(base))
# GPTQ int3 g64 on the same blocks, same calibration windows
import yaml
from llmcompressor import oneshot
from compress import compat
g = copy.deepcopy(base)
recipe = {"gptq_stage": {"gptq_modifiers": {"GPTQModifier": {"targets": [RE], "ignore": ["lm_head"], "dampening_frac": 0.01,
    "config_groups": {"group_0": {"targets": [RE], "weights": {"num_bits": 3, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64}}}}}}}
with compat.config_folder_for_oneshot(g):
    oneshot(model=g, recipe=yaml.safe_dump(recipe), dataset=calib.dataloader(), num_calibration_samples=32, max_seq_length=256, processor=tok)
log("gptq3 blocks0-3", ppl(g)); del g
v = copy.deepcopy(base)
cfg = VPTQModifierConfig(preset="vptq_v8_k4096_r128", targets=[RE], kmeans_iters=10, kmeans_max_samples=2**17)
r = apply_vptq(v, calib.samples, cfg, device="cpu")
log("vptq k4096_r128 blocks0-3 (no e2e)", ppl(v), "bits", r.size_report()["bits_per_weight"])
f = copy.deepcopy(base)
lin = target_linears(f, [RE], ["lm_head"]); _, blocks = decoder_blocks(f, lin)
equalize_model(blocks, lin, 1.0)
teacher = {n: m.weight.detach().clone() for n, m in lin.items()}
vl = target_linears(v, [RE], ["lm_head"])
for steps in (14, 14):
    with torch.enable_grad():
        tuned, rep = finetune_codebooks(v, calib.samples, r.layers, teacher, steps=steps, lr=1e-3, batch_size=4, holdout=0.125, seed=0, device=torch.device("cpu"))
    for n, vq in tuned.items():
        vl[n].weight.data.copy_(vq.dequantize(torch.float32))
    r.layers.update(tuned)
    log("after", steps, "more e2e steps: heldout KL", [round(h["heldout_kl"], 4) for h in rep["history"]], "ppl", ppl(v))
