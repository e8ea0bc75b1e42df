"""compress.runtime on CPU: every compressed-tensors format the pipeline writes loads, and its logits
equal those of transformers' own compressed-tensors loading (an independent implementation).

Checkpoints are made here with llmcompressor (data-free schemes) from a small random Llama whose
dimensions are multiples of 128, so that group 64 and 128 both apply.
"""

from __future__ import annotations

import json
from pathlib import Path
import warnings

import pytest
import torch

import kernels  # noqa: F401  (first: on CPU it turns Triton's interpreter on before anything imports triton)
import compress.runtime as rt
from compress.errors import CompressError
from compress.runtime.ct_pack import pack_int32, unpack_int32
from tests.conftest import STORIES as STORIES_DIR, w8a8_gemv_16_rows_on_cpu

STORIES = str(STORIES_DIR)

SCHEMES = {
    "w4a16_g128": "W4A16",
    "w4a16_g64_asym": {"weights": {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64}},
    "w8a8": "W8A8",
    "w8a16": "W8A16",
    "w8a16_channel": {"weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}},
    "fp8_dynamic": "FP8_DYNAMIC",
    "w8a8_sparse24": "W8A8",  # on 2:4-pruned weights, with the compress.sparse24 pack beside it
    # weight-only int8 per channel on 2:4 weights (the w8a16_sparse_awq recipe's scheme), pack beside it
    "w8a16_channel_sparse24": {"weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}},
}
EXPECTED_FORMAT = {
    "w4a16_g128": "compress.int4",
    "w4a16_g64_asym": "compress.int4",
    "w8a8": "compressed-tensors.w8a8",
    "w8a16": "compressed-tensors.w8a16",
    "w8a16_channel": "compressed-tensors.w8a16",
    "fp8_dynamic": "compressed-tensors.fp8-dynamic",
    "w8a8_sparse24": "compress.sparse24",
    "w8a16_channel_sparse24": "compress.sparse24",
}


def prune_24(model) -> list[str]:
    """Magnitude 2:4 pruning of every decoder Linear (keep the 2 largest of each 4 along in_features)."""
    names = []
    with torch.no_grad():
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear) and name != "lm_head":
                w = mod.weight
                g = w.reshape(w.shape[0], -1, 4)
                keep = g.abs().topk(2, dim=-1).indices
                mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, keep, True)
                w.copy_((g * mask).reshape_as(w))
                names.append(name)
    return names


def add_sparse24_pack(folder, layers) -> None:
    """What `compress run --pack sparse24` does after saving (compress/pipeline.py::_add_sparse24)."""
    from compress.checkpoint import write_sparse24_pack

    packed = write_sparse24_pack(folder, layers)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.setdefault("compress", {}).setdefault("sparsity", {})["packed"] = packed
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    pytest.importorskip("llmcompressor")
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("ckpts")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512, max_position_embeddings=256)
    base = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init, so that quantization error shows in logits
        for p in base.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    base.to(torch.float16).save_pretrained(root / "base")
    out = {"base": root / "base"}
    sparse = LlamaForCausalLM.from_pretrained(root / "base", dtype=torch.float16)
    sparse_layers = prune_24(sparse)
    sparse.save_pretrained(root / "base24")
    for name, scheme in SCHEMES.items():
        src = root / ("base24" if "sparse24" in name else "base")
        model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float16)
        if isinstance(scheme, str):
            mod = QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])
        else:
            mod = QuantizationModifier(config_groups={"g": {"targets": ["Linear"], **scheme}}, ignore=["lm_head"])
        oneshot(model=model, recipe=mod)
        model.save_pretrained(root / name, save_compressed=True)
        out[name] = root / name
    add_sparse24_pack(root / "w8a8_sparse24", sparse_layers)
    add_sparse24_pack(root / "w8a16_channel_sparse24", sparse_layers)
    # Dense fp16 2:4 weights with the pack (the sparsity-only recipe shape).
    dense24 = root / "fp16_sparse24"
    sparse.save_pretrained(dense24)
    add_sparse24_pack(dense24, sparse_layers)
    out["fp16_sparse24"] = dense24
    return out


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits.float()


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


# Stated tolerances (relative L2 error of the logits, float32, vs transformers' compressed-tensors path):
# weight-only formats compute the same dequantized weights -> 1e-5 (measured: 0).
# Formats with dynamic activation quantization flip exact rounding ties (x/scale = k + 0.5 happens on
# the lattice of values that quantized layers produce) under 1e-16 perturbations of the input, and a
# flipped activation propagates; per layer on identical inputs they agree to 1e-5, end to end to 3e-2
# (measured 1.2e-2 for W8A8, 6e-4 for FP8, against quantization errors of 4.6e-2 and 1.5e-1).
# The runtime's int8 activation quantizer follows kernels/w8a8.py (max|x|/127); transformers runs
# compressed-tensors' (max|x|/127.5, clamp to [-128, 127]). With compressed-tensors' convention
# switched on, everything else must agree to the tolerances above.
E2E_TOL = {"w8a8": 3e-2, "fp8_dynamic": 3e-2, "w8a8_sparse24": 3e-2}
CT_INT8_CONVENTION = {"qmax": 127.5, "qmin": -128.0, "eps": 1e-8}


@pytest.mark.parametrize("name", list(SCHEMES))
def test_logits_match_transformers(checkpoints, name, monkeypatch):
    from transformers import AutoModelForCausalLM

    from compress.runtime import formats_ct

    monkeypatch.setattr(formats_ct, "ACT_INT8", CT_INT8_CONVENTION)

    ids = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(1))
    with pytest.warns(rt.ReferenceFallbackWarning, match="plain-torch reference"):
        ours = rt.load(checkpoints[name], device="cpu")
    assert ours.compress_runtime.formats == {EXPECTED_FORMAT[name]: 14}
    native = AutoModelForCausalLM.from_pretrained(checkpoints[name], dtype=torch.float32)
    dense = AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)

    # Per layer, on the very inputs transformers' layer saw.
    seen = {}

    def keep(name):
        def hook(mod, inputs, output):
            seen.setdefault(name, (inputs[0].clone(), output.clone()))

        return hook

    for n, m in native.named_modules():
        if n.endswith("_proj"):
            m.register_forward_hook(keep(n))
    a, b, fp = _logits(ours, ids), _logits(native, ids), _logits(dense, ids)
    assert len(seen) == 14
    for n, (x, y) in seen.items():
        with torch.no_grad():
            assert _rel(ours.get_submodule(n)(x), y) < 1e-5, n

    tol = E2E_TOL.get(name, 1e-5)
    assert _rel(a, b) < tol, f"{name}: runtime vs transformers rel err {_rel(a, b):.2e}"
    assert _rel(b, fp) > 0.01  # the comparison has teeth: quantization moved the logits measurably
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.95


def test_w8a8_kernel_convention_stays_within_quantization_noise(checkpoints):
    """The kernel's activation convention draws another rounding grid: its logits differ from
    transformers' by about the quantization noise, and are no further from the dense model's."""
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 512, (2, 17), generator=torch.Generator().manual_seed(3))
    ours = rt.load(checkpoints["w8a8"], device="cpu", backend="reference")
    native = AutoModelForCausalLM.from_pretrained(checkpoints["w8a8"], dtype=torch.float32)
    dense = AutoModelForCausalLM.from_pretrained(checkpoints["base"], dtype=torch.float32)
    a, b, fp = _logits(ours, ids), _logits(native, ids), _logits(dense, ids)
    assert _rel(a, fp) < 1.25 * _rel(b, fp)
    assert (a.argmax(-1) == fp.argmax(-1)).float().mean() >= (b.argmax(-1) == fp.argmax(-1)).float().mean() - 0.05


def test_sparse24_pack_runs_the_24_format(checkpoints):
    """fp16 2:4 weights: the packed format gives the dense model's logits exactly (same products)."""
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 512, (2, 11), generator=torch.Generator().manual_seed(4))
    with pytest.warns(rt.ReferenceFallbackWarning):
        ours = rt.load(checkpoints["fp16_sparse24"], device="cpu")
    assert ours.compress_runtime.formats == {"compress.sparse24": 14}
    assert ours.model.layers[0].mlp.down_proj.values.shape == (256, 192)  # half of K=384 stored
    ref = AutoModelForCausalLM.from_pretrained(checkpoints["fp16_sparse24"], dtype=torch.float32)
    assert _rel(_logits(ours, ids), _logits(ref, ids)) < 1e-5


def _interpreter_works() -> bool:
    if torch.cuda.is_available():
        return True
    try:
        from kernels.w8a8 import quantize_per_token

        quantize_per_token(torch.ones(1, 16, dtype=torch.float16))
        return True
    except Exception:  # triton imported before kernels turned its interpreter on
        return False


@pytest.mark.parametrize("name", ["w4a16_g64_asym", "w8a8", "w8a8_sparse24", "fp16_sparse24", "w8a16", "w8a16_channel",
                                  "w8a16_channel_sparse24"])
def test_kernel_path_matches_reference(checkpoints, name):
    """The runtime's kernel wiring (Triton interpreter on CPU, compiled on GPU) computes the reference's
    math, on every path the path table may choose (kernel, dequantize + cuBLAS, torch._int_mm, GEMV)."""
    if not _interpreter_works():
        pytest.skip("Triton was imported before its CPU interpreter could be enabled")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(5)).to(dev)
    ker = rt.load(checkpoints[name], device=dev, dtype="float16", backend="kernel")
    assert set(ker.compress_runtime.backends.values()) == {"kernel"}
    # Per layer, same input: fp16 activations, fp32 accumulation on both sides (measured 7e-4 on CPU).
    g = torch.Generator().manual_seed(6)
    seen, shapes = set(), set()
    for n, mod in ker.model.layers[0].named_modules():  # layer 1 is covered by the logits below
        if isinstance(mod, rt.QuantLinear):
            # On the CPU (Triton's interpreter, seconds a kernel call) one layer of each shape: q/o, k/v and gate/up
            # run the same kernels on the same shapes; every layer still runs its kernels in the logits check below.
            if dev == "cpu" and (mod.out_features, mod.in_features) in shapes:
                continue
            shapes.add((mod.out_features, mod.in_features))
            # M = 1 (GEMVs), 3, and for one layer 20 tokens (torch._int_mm needs M > 16).
            for m in (1, 3, 20) if n == "mlp.down_proj" else (1, 3):
                if dev == "cpu" and m == 1 and n != "mlp.down_proj":
                    continue  # the one-token kernels take 4-13 s a call in the interpreter: down_proj's are checked
                x = torch.randn(m, mod.in_features, generator=g).half().to(dev)
                with rt.reference_backend(mod):
                    r = mod(x)
                checked = set()
                for path, fn in mod.kernel_paths(x):
                    # Tilings of one kernel count once: gemv_i8_16x256_w4 -> gemv_i8, gemm_w8_16_w4_s4 -> gemm_w8.
                    family = "_".join(path.split("_")[:2]) if path.startswith(("gemv_", "gemm_")) else path
                    # Triton's CPU interpreter takes seconds a tiling: there every tiling runs on down_proj (at each M)
                    # and the other layers run each kernel's first tiling (the test took 2-3 min a format on a slow
                    # 2-core machine, session 20). The GPU runs them all.
                    if dev == "cpu" and n != "mlp.down_proj" and family in checked:
                        continue
                    checked.add(family)
                    y = fn()
                    seen.add(family)
                    assert _rel(y, r) < 2e-3, (n, m, path, _rel(y, r))
                if dev != "cpu" or n == "mlp.down_proj":  # the CPU runs the first path again, as checked above
                    assert _rel(mod(x), r) < 2e-3
    expected = {"w4a16_g64_asym": {"kernel", "dequant+cublas"}, "w8a8": {"kernel", "int_mm", "gemv_i8"},
                "w8a8_sparse24": {"kernel", "dequant+w8a8", "dequant+int_mm"}, "fp16_sparse24": {"kernel", "dequant+cublas"},
                "w8a16": {"gemv_w8", "gemm_w8", "dequant+cublas"},
                "w8a16_channel": {"gemv_w8", "gemm_w8", "dequant+cublas"},
                "w8a16_channel_sparse24": {"kernel", "dequant+cublas"}}[name]
    if name == "w4a16_g64_asym" and dev == "cuda":
        from compress.runtime import kernel_bridge as kb

        if kb.unavailable(torch.device(dev), "w4a16_cuda", "supports") is None:
            expected = expected | {"cuda_gemv"}  # the CUDA C++ GEMV, where nvcc built it (M <= 8)
    assert seen == expected
    with torch.no_grad():
        a = ker(ids).logits
        with rt.reference_backend(ker):
            b = ker(ids).logits
    # End to end: weight-only formats agree as closely; dynamic int8 activations may flip a rounding
    # tie between the two accumulation orders and propagate it (see E2E_TOL).
    tol = 3e-2 if "w8a8" in name else 2e-3
    assert _rel(a, b) < tol, _rel(a, b)


def test_w8a8_prequantized_decode_matches_the_kernel_path(checkpoints, monkeypatch):
    """One-token decode of a W8A8 model where the norms (and silu*up) quantize their outputs and the
    runtime's int8 GEMV consumes them: the same int8 math as the W8A8 kernel quantizing x itself."""
    if not _interpreter_works():
        pytest.skip("Triton was imported before its CPU interpreter could be enabled")
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_runtime_fastpath import _EveryPath

    from compress.runtime import fastpath

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    w8a8_gemv_16_rows_on_cpu(monkeypatch)
    ker = rt.load(checkpoints["w8a8"], device=dev, dtype="float16", backend="kernel")
    every = _EveryPath(tol=2e-2, pick=-1)  # return the int8 GEMV's output: it feeds the next layer
    monkeypatch.setattr(fastpath, "TABLE", every)
    ids = torch.randint(0, 512, (1, 5), generator=torch.Generator().manual_seed(7)).to(dev)
    pre = fastpath.FastLM(ker, 1, 8, attn_kernel=True, prequant=True)
    plain = fastpath.FastLM(ker, 1, 8, attn_kernel=True, prequant=False)
    a, b = pre.prefill(ids), plain.prefill(ids)
    tok = a.argmax(-1, keepdim=True)
    a, b = pre.decode(tok), plain.decode(tok)
    assert "w8a8_prequant" in every.keys  # the int8 GEMV ran (and agreed per layer)
    assert _rel(a, b) < 2e-2


def test_dense_real_model_is_exact():
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 512, (1, 32), generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        # No compressed layers -> no fallback warning. Only ours is made an error: the GPU machine's torch
        # emits DeprecationWarnings (torch.jit) on imports that have nothing to do with this.
        warnings.simplefilter("error", rt.ReferenceFallbackWarning)
        ours = rt.load(STORIES, device="cpu")
    ref = AutoModelForCausalLM.from_pretrained(STORIES, dtype=torch.float32)
    assert torch.equal(_logits(ours, ids), _logits(ref, ids))
    assert ours.compress_runtime.summary() == "dense (no compressed layers)"


def test_reference_backend_has_no_warning_and_kernel_backend_errors_on_cpu(checkpoints):
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.ReferenceFallbackWarning)
        rt.load(checkpoints["w8a8"], device="cpu", backend="reference")
    with pytest.raises(CompressError, match="no kernel for format compressed-tensors.fp8-dynamic on cpu"):
        rt.load(checkpoints["fp8_dynamic"], device="cpu", backend="kernel")
    # W8A16 runs the runtime's own GPU paths (int8 GEMV, dequantize + cuBLAS): the reference on a CPU.
    with pytest.warns(rt.ReferenceFallbackWarning, match="Triton kernels need a CUDA GPU"):
        info = rt.load(checkpoints["w8a16"], device="cpu").compress_runtime
    assert info.backends == {"compressed-tensors.w8a16": "reference"}


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("shape", [(8, 64), (5, 37), (1, 8), (24, 130)])
def test_ct_pack_matches_compressed_tensors(bits, shape):
    ct = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1))
    q = torch.randint(lo, hi, shape, dtype=torch.int8, generator=torch.Generator().manual_seed(bits))
    for dim in (0, 1):
        ours = pack_int32(q, bits, dim)
        theirs = ct.pack_to_int32(q, bits, packed_dim=dim)
        assert torch.equal(ours, theirs)
        assert torch.equal(unpack_int32(ours, bits, shape[dim], dim), q)


def test_bad_inputs(tmp_path, checkpoints):
    with pytest.raises(CompressError, match="not a Hugging Face model folder"):
        rt.load(tmp_path / "nope", device="cpu")
    with pytest.raises(CompressError, match="device='tpu' is not supported"):
        rt.load(checkpoints["w8a8"], device="tpu")
    with pytest.raises(CompressError, match="dtype='int3' is not supported"):
        rt.load(checkpoints["w8a8"], device="cpu", dtype="int3")
    # An unsupported quant_method and an unsupported scheme are named in one line.
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = json.loads((checkpoints["w8a8"] / "config.json").read_text())
    for f in checkpoints["w8a8"].glob("*.safetensors"):
        (bad / f.name).symlink_to(f)
    cfg["quantization_config"]["quant_method"] = "gptq"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CompressError, match="quant_method='gptq' is not supported"):
        rt.load(bad, device="cpu")
    cfg["quantization_config"]["quant_method"] = "compressed-tensors"
    cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = False
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CompressError, match="only dynamic symmetric per-token activation"):
        rt.load(bad, device="cpu")


def test_registry_knows_every_format():
    keys = set(rt.known_formats())
    assert {"compressed-tensors.w8a8", "compressed-tensors.w8a16", "compressed-tensors.fp8-dynamic",
            "compressed-tensors.w4a16", "compress.int4"} <= keys
    with pytest.raises(CompressError, match="has no runtime implementation"):
        rt.get_format("compress.nonexistent")


def _vptq_checkpoint(base_dir, out_dir):
    """A compress.vptq checkpoint written by the VPTQ helper's own writer, with random codebooks and
    indices (no fitting, to stay fast); q_proj layers share one codebook scope."""
    from transformers import AutoModelForCausalLM

    from compress.vptq import VPTQConfig
    from compress.vptq import checkpoint as vptq_checkpoint
    from compress.vptq.format import VQWeight, pack_indices
    from compress.vptq.stage import VPTQResult

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(7)
    shared = (torch.randn(64, 8, generator=g) * 0.05).half()
    layers = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            n, k = mod.weight.shape
            own = name.endswith("q_proj")
            layers[name] = VQWeight(
                shape=(n, k), vector_len=8, index_bits=6,
                codebook=shared if own else (torch.randn(64, 8, generator=g) * 0.05).half(),
                indices=pack_indices(torch.randint(0, 64, (k, n // 8), generator=g), 6),
                res_codebook=(torch.randn(16, 8, generator=g) * 0.01).half(),
                res_indices=pack_indices(torch.randint(0, 16, (k, n // 8), generator=g), 4), res_index_bits=4,
                scale=(1 + 0.1 * torch.randn(n, generator=g)).half(), bias=(0.01 * torch.randn(n, generator=g)).half(),
                codebook_key="self_attn.q_proj" if own else None)
            mod.weight.data = layers[name].dequantize(torch.float32)
    result = VPTQResult(layers=layers, config=VPTQConfig(), targets=["Linear"], ignore=["lm_head"], fit_seconds=0.0,
                        device="cpu")
    return vptq_checkpoint.save(model, None, out_dir, result, torch.float16, {"recipe": "test"})


def test_vptq_checkpoint_matches_its_reference_loader_and_kernel(checkpoints, tmp_path):
    from compress.vptq import checkpoint as vptq_checkpoint

    out = _vptq_checkpoint(checkpoints["base"], tmp_path / "vptq")
    ids = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(8))
    with pytest.warns(rt.ReferenceFallbackWarning):
        ours = rt.load(out, device="cpu")
    assert ours.compress_runtime.formats == {"compress.vptq": 14}
    # Shared codebook scope: one tensor on the device for all q_proj layers.
    q0, q1 = (ours.get_submodule(f"model.layers.{i}.self_attn.q_proj") for i in (0, 1))
    assert q0.vq_codebook.data_ptr() == q1.vq_codebook.data_ptr()
    assert _rel(_logits(ours, ids), _logits(vptq_checkpoint.load(out), ids)) < 1e-5
    if _interpreter_works():  # the fused GEMV path (M <= 4), one layer: compiled on a GPU, interpreted on a CPU
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        ker = rt.load(out, device=dev, dtype="float16", backend="kernel")
        mod = ker.get_submodule("model.layers.1.mlp.down_proj")
        x = torch.randn(2, mod.in_features, generator=torch.Generator().manual_seed(9)).half().to(dev)
        y = mod(x)
        with rt.reference_backend(mod):
            r = mod(x)
        assert _rel(y, r) < 2e-3


def test_prepacked_int4_checkpoint_loads_without_repacking(checkpoints, tmp_path):
    """quant_method "compress", format "compress.int4": tensors already in the kernel layout
    (compress/packing/int4.py), as `compress run --pack` would write them; no repacking at load."""
    from safetensors.torch import load_file, save_file

    from compress.packing.int4 import from_compressed_tensors

    src = checkpoints["w4a16_g64_asym"]
    cfg = json.loads((src / "config.json").read_text())
    state = load_file(src / "model.safetensors")
    out, layers = {}, {}
    for key in list(state):
        if key.endswith(".weight_packed"):
            p = key[: -len(".weight_packed")]
            packed = from_compressed_tensors(state.pop(key), state.pop(f"{p}.weight_scale"), state.pop(f"{p}.weight_shape"),
                                             state.pop(f"{p}.weight_zero_point"), group_size=64)
            out.update({f"{p}.{n}": t for n, t in packed.items()})
            layers[p] = {"group_size": 64}
    out.update(state)
    cfg["quantization_config"] = {"quant_method": "compress", "format": "compress.int4", "version": 1, "layers": layers}
    dst = tmp_path / "int4"
    dst.mkdir()
    save_file(out, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(cfg))
    ids = torch.randint(0, 512, (1, 7), generator=torch.Generator().manual_seed(10))
    with pytest.warns(rt.ReferenceFallbackWarning):
        a = rt.load(dst, device="cpu")
        b = rt.load(src, device="cpu")
    assert a.compress_runtime.formats == {"compress.int4": 14}
    assert torch.equal(_logits(a, ids), _logits(b, ids))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_index_the_machine_lacks_is_refused_with_the_fix():
    n = torch.cuda.device_count()
    with pytest.raises(CompressError, match=rf"device='cuda:{n}': this machine has {n} CUDA GPU.*; pick one of them"):
        rt.load(STORIES, device=f"cuda:{n}")


def test_a_gpu_device_without_a_gpu_is_refused_with_the_fix():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(CompressError, match=r"no CUDA GPU is visible; pass device='cpu'"):
        rt.load(STORIES, device="cuda:1")
