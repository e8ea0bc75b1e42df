# Which layers carry the full-model damage? Put float (equalised) weights back into chosen layers of the cached
# full-model rmix fit and re-measure PPL on the same 8 windows.
import sys, copy, re, torch
sys.path.insert(0, "/work/main")
from pathlib import Path
from compress.model_source import load_model, load_tokenizer, resolve_model
from compress.vptq.equalize import equalize_model
from compress.vptq.stage import decoder_blocks, target_linears
from eval.perplexity import perplexity, tokenize_eval_text
src = resolve_model(None); tok = load_tokenizer(src); base = load_model(src, "cpu", torch.float32).eval()
ids = tokenize_eval_text(Path("/work/main/.data/wikitext2_raw_test.txt").read_text(), tok)
regex = "re:model\\.layers\\.(" + "|".join(map(str, range(30))) + ")\\..*"
tm = copy.deepcopy(base); tl = target_linears(tm, [regex], ["lm_head"]); equalize_model(decoder_blocks(tm, tl)[1], tl, 1.0)
sd = torch.load("/tmp/vptq_diag/vptq_vptq_v8_k4096_rmix_b30.pt")
m = copy.deepcopy(base); lin = target_linears(m, [regex], ["lm_head"])
P = dict(m.named_parameters())
for n, t in sd["other"].items(): P[n].data.copy_(t)
for pat in sys.argv[1:]:
    for n, l in lin.items():
        l.weight.data.copy_(tl[n].weight if re.search(pat, n) else sd["w"][n])
    print(f"float weights in /{pat}/: PPL(8x2048) {perplexity(m, ids, 2048, 8).ppl:.3f}", flush=True)
