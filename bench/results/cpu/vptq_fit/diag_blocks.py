"""Issue-4 diagnosis on CPU: where does VPTQ lose to GPTQ int3 g64 on SmolLM2, layer by layer?

Quantizes blocks 0..B-1 of SmolLM2-135M (same 32 x 256 C4 calibration windows for both methods), then runs
held-out WikiText-2 tokens through each quantized model and, for every quantized Linear, on the inputs that
model itself produces (so errors of earlier layers are included, as in inference):
    rel_err = ||(W_f - W_q) x||^2 / ||W_f x||^2      (the layer's relative output error)
    gain    = <W_f x, W_q x> / ||W_f x||^2           (1 = unbiased; < 1 = outputs shrunk toward 0)
    norm    = ||W_q x|| / ||W_f x||
and, per block, the residual stream's relative error against the float model. W_f is the float weight in
the same parametrisation (equalised for VPTQ: same function). PPL on the first 3 windows of 2048.
Each VPTQ arm also records the layers given their own codebooks (own_codebooks) with their distortion
ratios, and logs every fitted layer as it finishes.

    OMP_NUM_THREADS=1 python bench/results/cpu/vptq_fit/diag_blocks.py --blocks 4 --arm gptq3 --arm vptq:vptq_v8_k4096_r128
Arms: gptq<bits>, vptq:<preset>[:field=value,...]. Quantized weights are cached in --cache (reruns skip the fit).
`--finetune steps=224,lr=1e-3,norms=1[,batch=8,holdout=0.125]` (repeatable): after each freshly fitted VPTQ arm, the
end-to-end codebook/scale refinement (compress/vptq/finetune.py, the function `finetune_steps` runs inside
apply_vptq) from that one fit, once per spec, each scored like an arm: one fit, several refinements.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.0f}s]", *a, flush=True)


def gptq(model, calib, tok, bits, regex):
    import yaml
    from llmcompressor import oneshot

    from compress import compat

    recipe = {"gptq_stage": {"gptq_modifiers": {"GPTQModifier": {
        "targets": [regex], "ignore": ["lm_head"], "dampening_frac": 0.01,
        "config_groups": {"group_0": {"targets": [regex], "weights": {
            "num_bits": bits, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64}}}}}}}
    with compat.config_folder_for_oneshot(model):
        oneshot(model=model, recipe=yaml.safe_dump(recipe), dataset=calib.dataloader(),
                num_calibration_samples=calib.num_samples, max_seq_length=calib.seq_len, processor=tok)
    # llmcompressor leaves fake-quantized float weights in .weight (the reconstruction) plus scale tensors
    return {"bits": None}


@torch.no_grad()
def measure(model, teacher_w, base_model, ids, linears):
    """Per-linear rel_err/gain/norm on the model's own inputs; per-block residual rel error vs float."""
    acc = {n: torch.zeros(4, dtype=torch.float64) for n in linears}  # |Wx|^2, |Ex|^2, <Wx,Qx>, |Qx|^2
    hooks = []
    mods = dict(model.named_modules())
    for n in linears:
        wf = teacher_w[n].float()

        def hook(m, args, out, n=n, wf=wf):
            x = args[0].reshape(-1, args[0].shape[-1]).float()
            fx = x @ wf.t()
            qx = out.reshape(-1, out.shape[-1]).float()
            a = acc[n]
            a[0] += float(fx.pow(2).sum())
            a[1] += float((fx - qx).pow(2).sum())
            a[2] += float((fx * qx).sum())
            a[3] += float(qx.pow(2).sum())

        hooks.append(mods[n].register_forward_hook(hook))
    out_q = model(ids[None], output_hidden_states=True, use_cache=False).hidden_states
    for h in hooks:
        h.remove()
    out_f = base_model(ids[None], output_hidden_states=True, use_cache=False).hidden_states
    layer = {n: {"rel_err": float(a[1] / a[0]), "gain": float(a[2] / a[0]), "norm": float((a[3] / a[0]).sqrt())} for n, a in acc.items()}
    block = [float((q - f).pow(2).sum() / f.pow(2).sum()) for q, f in zip(out_q[1:], out_f[1:])]
    block_norm = [float(q.norm() / f.norm()) for q, f in zip(out_q[1:], out_f[1:])]
    return layer, block, block_norm


def refine_and_score(fitted, r, teacher, calib, spec, base, probe, lin, ids, args, cfg):
    """One refinement spec from a copy of a fitted VPTQ model, scored like an arm."""
    from compress.vptq.finetune import finetune_codebooks
    from eval.perplexity import perplexity

    kw = dict(steps=112, lr=1e-3, batch=8, holdout=0.125, norms=0)
    kw.update({k: json.loads(v) for k, v in (i.split("=", 1) for i in spec.split(","))})
    t = time.time()
    model = copy.deepcopy(fitted)
    with torch.enable_grad():
        tuned, rep = finetune_codebooks(
            model, calib.samples, r.layers, teacher, steps=kw["steps"], lr=kw["lr"],
            batch_size=kw["batch"], holdout=kw["holdout"], seed=cfg.vptq().seed, device=torch.device(args.device),
            train_norms=bool(kw["norms"]),
        )
    mods = dict(model.named_modules())
    for n, vq in tuned.items():
        mods[n].weight.data.copy_(vq.dequantize(mods[n].weight.dtype))
    ft_s = time.time() - t
    model.eval()
    layer, block, block_norm = measure(model, teacher, base, probe, list(lin))
    ppl = perplexity(model, ids, 2048, args.windows or None).ppl
    hist = " ".join(f"{h['step']}:{h['heldout_kl']:.4f}" for h in rep["history"])
    log("finetune", spec, "ppl", round(ppl, 3), f"{ft_s:.1f} s", "held-out KL", hist)
    # same indices and tensor shapes as the fit: the arm's bits/weight hold
    return {"ppl": ppl, "finetune_s": ft_s, "finetune": rep, "layer": layer, "block_rel_err": block, "block_norm": block_norm}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--arm", action="append", default=[])
    p.add_argument("--cache", default="/tmp/vptq_diag", help="folder for fitted weights, or 'none'")
    p.add_argument("--out", default=None)
    p.add_argument("--windows", type=int, default=3, help="PPL windows of 2048 (0 = all)")
    p.add_argument("--model", default=None, help="a .gguf path (default: the embedded SmolLM2)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default=None, help="folder with c4_sample_300.jsonl and wikitext2_raw_test.txt")
    p.add_argument("--calib", default="32x256", help="calibration windows x tokens")
    p.add_argument("--full-kmeans", action="store_true", help="the presets' k-means (default: 10 steps, 2^17 samples)")
    p.add_argument("--finetune", action="append", default=[], help="refinement spec run from each VPTQ arm's fit")
    args = p.parse_args()
    torch.manual_seed(0)
    from calibration.sampling import build_calibration_set, load_documents
    from compress.model_source import load_model, load_tokenizer, resolve_model
    from compress.vptq import VPTQModifierConfig, apply_vptq
    from compress.vptq.equalize import equalize_model
    from compress.vptq.stage import decoder_blocks, target_linears
    from eval.perplexity import perplexity, tokenize_eval_text

    src = resolve_model(args.model)
    tok = load_tokenizer(src)
    dev = args.device
    base = load_model(src, dev, torch.float32).eval()
    data = Path(args.data) if args.data else ROOT / ".data"
    n_cal, len_cal = (int(v) for v in args.calib.split("x"))
    calib = build_calibration_set(load_documents(str(data / "c4_sample_300.jsonl")), tok, n_cal, len_cal, seed=0, layout="stream")
    ids = tokenize_eval_text((data / "wikitext2_raw_test.txt").read_text(), tok)
    probe = ids[-2048:].to(dev)  # held-out tokens for the layer measures (the PPL windows are the first ones)
    regex = f"re:model\\.layers\\.({'|'.join(str(i) for i in range(args.blocks))})\\..*"
    cache = None if args.cache == "none" else Path(args.cache)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    results = {}
    for arm in args.arm:
        t_arm = time.time()
        r = None  # the VPTQ fit result, when this arm fits one (the refinements start from it)
        key = re.sub(r"[^\w.-]+", "_", arm) + f"_b{args.blocks}"
        if args.calib != "32x256" or args.full_kmeans or args.model:
            key += f"_{args.calib}{'_full' if args.full_kmeans else ''}{'_m' if args.model else ''}"
        model = copy.deepcopy(base)
        lin = target_linears(model, [regex], ["lm_head"])
        if arm.startswith("vptq"):
            _, preset, *rest = arm.split(":")
            items = re.split(r",(?=\w+=)", ":".join(rest)) if rest else []  # values may hold commas (JSON dicts)
            over = {a: json.loads(b) for a, b in (i.split("=", 1) for i in items if i)}
            if not args.full_kmeans:
                over.setdefault("kmeans_iters", 10)
                over.setdefault("kmeans_max_samples", 2**17)
            cfg = VPTQModifierConfig(preset=preset, targets=[regex], **over)
        # the float weights in the same (equalised) parametrisation, from a separate copy (apply_vptq folds its own)
        tm = copy.deepcopy(base)
        tlin = target_linears(tm, [regex], ["lm_head"])
        if arm.startswith("vptq") and cfg.vptq().equalize > 0:
            equalize_model(decoder_blocks(tm, tlin)[1], tlin, cfg.vptq().equalize)
        teacher = {n: m.weight.detach().clone() for n, m in tlin.items()}
        del tm, tlin
        f = None if cache is None else cache / f"{key}.pt"
        info = {}
        if f is not None and f.exists():
            sd = torch.load(f)
            for n, m in lin.items():
                m.weight.data.copy_(sd["w"][n])
            info = sd["info"]
            # norms folded by equalisation live outside the Linears: restore them too
            for n, t in sd.get("other", {}).items():
                dict(model.named_parameters())[n].data.copy_(t)
            log(arm, "loaded from cache")
        else:
            t = time.time()
            if arm.startswith("gptq"):
                gptq(model, calib, tok, int(arm[4:]), regex)
                info = {"fit_s": time.time() - t}
            else:
                r = apply_vptq(model, calib.samples, cfg, device=dev, progress=lambda d, n, m: log(f"  [{d}/{n}] {m}"))
                info = {"fit_s": time.time() - t, "bits": r.size_report()["bits_per_weight"],
                        "proxy": {n: s["proxy_loss"] for n, s in r.stats.items()},
                        "own": sorted(n for n, s in r.stats.items() if s.get("own_codebook")),
                        "distortion_ratio": {n: s["distortion_ratio"] for n, s in r.stats.items() if "distortion_ratio" in s}}
                log(arm, "own codebooks:", info["own"])
            other = {n: p.detach().clone() for n, p in model.named_parameters() if "norm" in n}
            if f is not None:
                torch.save({"w": {n: m.weight.detach().clone() for n, m in lin.items()}, "info": info, "other": other}, f)
            log(arm, "fitted", info.get("fit_s"), "bits", info.get("bits"))
        model.eval()
        layer, block, block_norm = measure(model, teacher, base, probe, list(lin))
        ppl = perplexity(model, ids, 2048, args.windows or None).ppl
        results[arm] = {"ppl": ppl, "arm_s": time.time() - t_arm, "layer": layer, "block_rel_err": block, "block_norm": block_norm, **info}
        log(arm, "ppl", round(ppl, 3), "bits", info.get("bits"))
        if args.out:  # after every arm: a killed run keeps what it finished
            Path(args.out).write_text(json.dumps(results, indent=1))
        for spec in args.finetune if r is not None else []:
            results[f"{arm}+ft({spec})"] = refine_and_score(model, r, teacher, calib, spec, base, probe, lin, ids, args, cfg)
            if args.out:
                Path(args.out).write_text(json.dumps(results, indent=1))
        del model
    types = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    print("\nrel_err (gain) per layer type, mean over blocks")
    print("arm".ljust(50), " ".join(t.ljust(16) for t in types))
    for arm, r in results.items():
        cells = []
        for t in types:
            ls = [v for n, v in r["layer"].items() if n.endswith(t)]
            cells.append(f"{sum(v['rel_err'] for v in ls) / len(ls):.4f} ({sum(v['gain'] for v in ls) / len(ls):.3f})".ljust(16))
        print(arm[:50].ljust(50), " ".join(cells), f"ppl {r['ppl']:.3f}")
    print("\nresidual-stream rel err after each block")
    for arm, r in results.items():
        print(arm[:50].ljust(50), " ".join(f"{b:.4f}" for b in r["block_rel_err"][: args.blocks + 1]), "... last", f"{r['block_rel_err'][-1]:.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
