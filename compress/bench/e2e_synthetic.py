"""Synthetic models for `compress bench e2e --synthetic`: published architectures, random weights,
compressed data-free into the very tensors the pipeline writes, then built by the runtime's own
format classes (`QuantLinear.from_checkpoint`), exactly as a checkpoint on disk would be.

Speed does not depend on weight values (fixed-length greedy generation, no early stop), so random
weights measure what a real checkpoint of the same shape and format would. Outputs say "synthetic".

Formats (data-free):
| name          | tensors written (per Linear)                                  | as the pipeline's recipe   |
| ------------- | ------------------------------------------------------------- | -------------------------- |
| fp16          | weight                                                        | original                   |
| w4a16         | RTN int4 group 128 symmetric, compressed-tensors pack-quantized | w4a16_* (GPTQ/AWQ values) |
| w8a16         | RTN int8 group 128, pack-quantized (compressed-tensors W8A16)  | w8a16_*                    |
| w8a8          | RTN int8 per channel, int-quantized, dynamic per-token acts    | w8a8_*                     |
| fp8           | float8 e4m3 per channel, float-quantized, dynamic per-token acts | fp8_dynamic              |
| sparse24      | 2:4 magnitude prune, compress.sparse24 fp16 values + meta      | 2:4 recipes with --pack    |
| w8a8-sparse24 | 2:4 magnitude prune then int8 per channel, sparse24 int8 values | w8a8_sparse_* with --pack |
| w8a16-sparse24 | the same int8 values, weight-only (activations as they are)   | w8a16_sparse_awq with --pack |
| vptq          | random 4096 x 8 main + 256 x 8 residual codebooks, random indices, compress.vptq | vptq_v8_k4096_r256 |
"""

from __future__ import annotations

import torch
import torch.nn as nn

from compress.errors import CompressError
from compress.packing.sparse24 import pack_sparse24
from compress.runtime.ct_pack import pack_int32
from compress.runtime.loader import RuntimeInfo, build_skeleton, choose_backends, finish_dense_part, linear_modules
from compress.runtime.registry import get_format
from compress.runtime.spec import LayerSpec

# Published configurations (Hugging Face config.json values), written here so no hub is needed.
_LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
ARCHS: dict[str, dict] = {
    # meta-llama/Llama-3.1-8B (Llama-3-8B shapes; the 3.1 RoPE gives the 16k-token workload its positions)
    "llama-3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                       rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=_LLAMA3_ROPE, tie_word_embeddings=False,
                       hidden_act="silu", attention_bias=False, mlp_bias=False),
    # Qwen/Qwen3-8B
    "qwen3-8b": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                     hidden_act="silu", attention_bias=False),
    # meta-llama/Llama-3.1-70B layer shapes, first 8 of its 80 decoder layers (fits one GPU in fp16)
    "llama-3-70b-layers": dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=8,
                               num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                               max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                               rope_scaling=_LLAMA3_ROPE, tie_word_embeddings=False, hidden_act="silu",
                               attention_bias=False, mlp_bias=False),
}
DEFAULT_FORMATS = ["fp16", "w4a16", "w8a8", "fp8", "sparse24", "w8a8-sparse24", "vptq"]
INIT_STD = 0.02  # transformers' default initializer_range


# ---- data-free quantizers: float (N, K) -> (format key, args, checkpoint tensors) ----------------


def _absmax_scale(w: torch.Tensor, qmax: float, dim: int = -1) -> torch.Tensor:
    """compressed-tensors' memoryless min-max scale, stored in fp16: max|w| / qmax."""
    return (w.float().abs().amax(dim=dim, keepdim=True) / qmax).clamp(min=1e-8).to(torch.float16)


def _divide(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # compressed-tensors divides in the weight's dtype (fp16) before rounding; doing the same gives
    # the pipeline's bytes exactly (an fp32 division rounds ~1% of the values the other way).
    return w / scale.to(w.dtype)


def rtn_int4_ct(w: torch.Tensor, group_size: int = 128):
    """compressed-tensors W4A16 (symmetric, group): scale = max|w| / 7.5, q = clamp(round(w/s), -8, 7)."""
    n, k = w.shape
    wg = w.reshape(n, k // group_size, group_size)
    scale = _absmax_scale(wg, 7.5)  # (N, G, 1)
    q = torch.round(_divide(wg, scale)).clamp(-8, 7).to(torch.int8).reshape(n, k)
    args = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": group_size}
    tensors = {"weight_packed": pack_int32(q, 4), "weight_scale": scale.reshape(n, -1),
               "weight_shape": torch.tensor([n, k])}
    return "compressed-tensors.w4a16", args, tensors


def rtn_int8_group_ct(w: torch.Tensor, group_size: int = 128):
    """compressed-tensors W8A16 preset: int8 group 128, pack-quantized."""
    n, k = w.shape
    wg = w.reshape(n, k // group_size, group_size)
    scale = _absmax_scale(wg, 127.5)
    q = torch.round(_divide(wg, scale)).clamp(-128, 127).to(torch.int8).reshape(n, k)
    args = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "group", "group_size": group_size}
    return "compressed-tensors.w8a16", args, {"weight_packed": pack_int32(q, 8), "weight_scale": scale.reshape(n, -1),
                                               "weight_shape": torch.tensor([n, k])}


def _int8_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = _absmax_scale(w, 127.5)  # (N, 1)
    return torch.round(_divide(w, scale)).clamp(-128, 127).to(torch.int8), scale


_DYNAMIC_TOKEN = {"num_bits": 8, "symmetric": True, "strategy": "token", "dynamic": True}


def rtn_w8a8_ct(w: torch.Tensor):
    q, scale = _int8_channel(w)
    args = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
            "input_activations": {**_DYNAMIC_TOKEN, "type": "int"}}
    return "compressed-tensors.w8a8", args, {"weight": q, "weight_scale": scale}


def fp8_ct(w: torch.Tensor):
    scale = _absmax_scale(w, 448.0)
    q = _divide(w, scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    args = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
            "input_activations": {**_DYNAMIC_TOKEN, "type": "float"}}
    return "compressed-tensors.fp8-dynamic", args, {"weight": q, "weight_scale": scale}


def prune_24_magnitude(w: torch.Tensor) -> torch.Tensor:
    """Keep the two largest |w| of every group of 4 along in_features (data-free 2:4)."""
    g = w.reshape(w.shape[0], -1, 4)
    keep = g.abs().topk(2, dim=-1).indices
    return (g * torch.zeros_like(g, dtype=torch.bool).scatter_(-1, keep, True)).reshape_as(w)


def sparse24_fp16(w: torch.Tensor):
    packed = pack_sparse24(prune_24_magnitude(w))
    return "compress.sparse24", {"version": 1, "base_format": "dense"}, packed


def sparse24_w8a8(w: torch.Tensor):
    q, scale = _int8_channel(prune_24_magnitude(w))  # pruned zeros stay exact zeros in int8
    packed = pack_sparse24(q)
    return "compress.sparse24", {"version": 1, "base_format": "compressed-tensors.w8a8"}, {**packed, "weight_scale": scale}


def sparse24_w8a16(w: torch.Tensor):
    """Weight-only int8 per channel on 2:4 (the w8a16_sparse_awq recipe's layers, data-free)."""
    q, scale = _int8_channel(prune_24_magnitude(w))
    packed = pack_sparse24(q)
    return "compress.sparse24", {"version": 1, "base_format": "compressed-tensors.w8a16"}, {**packed, "weight_scale": scale}


def random_vptq(w: torch.Tensor, main: int = 4096, residual: int = 256, v: int = 8):
    """Random codebooks and indices in the compress.vptq layout (speed only; the values are noise)."""
    from compress.vptq.format import index_bits, pack_indices

    n, k = w.shape
    gen = torch.Generator(device=w.device).manual_seed(int(w.flatten()[:4].float().abs().sum().item() * 1e6) % 2**31)
    b, rb = index_bits(main), index_bits(residual)
    idx = torch.randint(0, main, (k, n // v), device=w.device, generator=gen)
    ridx = torch.randint(0, residual, (k, n // v), device=w.device, generator=gen)
    tensors = {
        "vptq_indices": pack_indices(idx, b),
        "vptq_codebook": (torch.randn(main, v, device=w.device, generator=gen) * INIT_STD).half(),
        "vptq_res_indices": pack_indices(ridx, rb),
        "vptq_res_codebook": (torch.randn(residual, v, device=w.device, generator=gen) * INIT_STD / 4).half(),
        "vptq_scale": torch.ones(n, device=w.device, dtype=torch.float16),
        "vptq_bias": torch.zeros(n, device=w.device, dtype=torch.float16),
    }
    args = {"vector_len": v, "num_centroids": main, "index_bits": b, "num_res_centroids": residual,
            "res_index_bits": rb, "shape": [n, k]}
    return "compress.vptq", args, tensors


QUANTIZERS = {
    "w4a16": rtn_int4_ct,
    "w8a16": rtn_int8_group_ct,
    "w8a8": rtn_w8a8_ct,
    "fp8": fp8_ct,
    "sparse24": sparse24_fp16,
    "w8a8-sparse24": sparse24_w8a8,
    "w8a16-sparse24": sparse24_w8a16,
    "vptq": random_vptq,
}
FORMATS = ["fp16", *QUANTIZERS]


def parse_formats(spec: str | None) -> list[str]:
    if not spec:
        return list(DEFAULT_FORMATS)
    out = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [f for f in out if f not in FORMATS]
    if bad:
        raise CompressError(f"--formats: unknown synthetic format {bad[0]!r}; choose from {', '.join(FORMATS)}")
    return out


def build_synthetic(arch: str, fmt: str, device: str | torch.device, dtype: torch.dtype = torch.float16,
                    seed: int = 0, backend: str = "auto") -> nn.Module:
    """`arch` with random weights, every decoder Linear compressed into `fmt` through the runtime."""
    if arch not in ARCHS:
        raise CompressError(f"--synthetic {arch!r} is unknown; choose from {', '.join(ARCHS)}")
    if fmt not in FORMATS:
        raise CompressError(f"synthetic format {fmt!r} is unknown; choose from {', '.join(FORMATS)}")
    device = torch.device(device)
    cfg = dict(ARCHS[arch])
    model = build_skeleton(cfg, dtype)
    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape):
        return (torch.randn(*shape, device=device, generator=gen) * INIT_STD).to(dtype)

    placed = {}
    for name, lin in linear_modules(model).items():
        w = rand(lin.out_features, lin.in_features)
        if name == "lm_head" or fmt == "fp16":  # the pipeline keeps lm_head dense
            model.set_submodule(name, _dense(w))
            continue
        key, args, tensors = QUANTIZERS[fmt](w)
        spec = LayerSpec(name, key, lin.in_features, lin.out_features, False, args)
        mod = get_format(key).from_checkpoint(spec, _Tensors(tensors), device=device, dtype=dtype)
        model.set_submodule(name, mod)
        placed[name] = mod
        del w, tensors
    dense = {n: (torch.ones(p.shape, device=device, dtype=dtype) if n.endswith("norm.weight") else rand(*p.shape))
             for n, p in model.named_parameters() if p.is_meta}
    finish_dense_part(model, dense, device, dtype)
    info = RuntimeInfo(checkpoint=f"synthetic:{arch}:{fmt}", device=str(device), dtype=str(dtype).replace("torch.", ""),
                       synthetic=True)
    choose_backends(placed, device, backend, info)
    model.compress_runtime = info
    return model.eval()


class _Tensors(dict):
    """Checkpoint tensors of one synthetic layer (no shared tensors)."""

    def shared(self, name):
        return None


def _dense(w: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False, device="meta")
    lin.weight = nn.Parameter(w, requires_grad=False)
    return lin
