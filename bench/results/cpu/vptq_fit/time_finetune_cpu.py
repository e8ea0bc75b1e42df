"""Time the end-to-end distillation of the *_ft VPTQ presets on the CPU, from a fitted own8 checkpoint.

`compress run vptq_v8_k4096_r128_own8_ft` = the own8 layer-wise fit + `finetune_steps` Adam steps of
compress/vptq/finetune.py. The fit's CPU time is measured by `compress run vptq_v8_k4096_r128_own8 --device cpu`;
this script measures the second part on the same machine: it loads that run's checkpoint (fitted codebooks,
indices, row scales, equalised norms), rebuilds the float teacher in the same equalised parametrisation and the
recipe's calibration windows (c4, 128 x 512, stream, seed 0), and runs `finetune_codebooks` exactly as the
preset does (lr 1e-3, batch 8, 16 windows held out, norms learning) for --steps steps, printing the time per
step and per held-out scoring. 224 steps at that rate is the preset's CPU cost.

    python bench/results/cpu/vptq_fit/time_finetune_cpu.py --checkpoint out/ckpt --steps 14
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True, help="folder written by compress run vptq_v8_k4096_r128_own8")
    p.add_argument("--model", default=None, help="the float model it came from (default: the embedded SmolLM2)")
    p.add_argument("--steps", type=int, default=14, help="Adam steps to time (14 = one pass over 112 windows)")
    args = p.parse_args()

    from calibration.sampling import build_calibration_set, load_documents
    from compress.model_source import load_model, load_tokenizer, resolve_model
    from compress.vptq import checkpoint as vptq_checkpoint
    from compress.vptq.equalize import equalize_model
    from compress.vptq.finetune import finetune_codebooks
    from compress.vptq.stage import decoder_blocks, target_linears

    t0 = time.perf_counter()
    cfg = vptq_checkpoint.vptq_config_of(args.checkpoint)
    layers = vptq_checkpoint.read_layers(args.checkpoint)
    student = vptq_checkpoint.load(args.checkpoint).eval()
    src = resolve_model(args.model)
    tok = load_tokenizer(src)
    teacher_model = load_model(src, "cpu", torch.float32).eval()
    tlin = target_linears(teacher_model, ["Linear"], ["lm_head"])
    equalize_model(decoder_blocks(teacher_model, tlin)[1], tlin, cfg.equalize)
    teacher = {n: m.weight.detach().clone() for n, m in tlin.items() if n in layers}
    del teacher_model
    calib = build_calibration_set(load_documents("c4"), tok, 128, 512, seed=0, layout="stream")
    print(f"set-up {time.perf_counter() - t0:.1f} s; {len(layers)} layers; threads {torch.get_num_threads()}", flush=True)

    marks = []

    def progress(step, total, msg):
        marks.append((step, time.perf_counter()))
        print(f"[{time.perf_counter() - t1:7.1f} s] step {step}/{total}: {msg}", flush=True)

    t1 = time.perf_counter()
    with torch.enable_grad():
        _, report = finetune_codebooks(
            student, calib.samples, layers, teacher, steps=args.steps, lr=cfg.finetune_lr, batch_size=cfg.finetune_batch,
            holdout=cfg.finetune_holdout, seed=cfg.seed, device=torch.device("cpu"), train_norms=True, progress=progress,
        )
    total = time.perf_counter() - t1
    print(f"{args.steps} steps (and {len(report['history'])} held-out scorings) in {total:.1f} s: "
          f"{total / args.steps:.1f} s per step including the scorings; held-out KL {report['heldout_kl_start']:.4f} -> "
          f"{report['heldout_kl_best']:.4f}", flush=True)


if __name__ == "__main__":
    main()
