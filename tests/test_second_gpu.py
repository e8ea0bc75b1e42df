"""The kernels and the runtime on a GPU that is not the current one (GPU only; needs two CUDA devices).

`compress.runtime.load(checkpoint, device="cuda:1")` is accepted, and torch ops run on their tensors' device whatever
the current device is. Our kernels must too: the ctypes launchers ask the CUDA runtime for the current device (its
occupancy, its shared-memory limit) and launch on the stream they are given, and Triton launches on the current device.
Here device 0 stays current while every path of every format runs on Llama-3-8B layer shapes on device 1, and a
generation with CUDA graphs runs there. Each result is checked against the plain-torch reference of the same layer.
Before session 40's fix (kernels.op_dispatch.on_input_device, per-device kernel attributes in launch_ex.cuh) the first
W4A16 layer already hit an illegal memory access on two H200s (bench/results/h200/kernels_s40/call1).
"""

from __future__ import annotations

import pytest
import torch

import kernels  # noqa: F401  (first: sets up Triton before anything imports it)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                                   reason="needs two CUDA GPUs")]

SECOND = "cuda:1"
# Per layer on the same input, fp32 accumulation on both sides; the int8-activation formats quantize x the same way on
# both sides but sum in another order (a rounding tie may flip), hence the looser bound. A launch on the wrong device
# fails outright or leaves garbage (relative error ~1). fp8's rowwise-scaled GEMM returns bf16 (8 mantissa bits) before
# the cast to fp16: 2.5-3.2e-3 on the 8B q/k layers (session 40, call 3).
TOL = {"w8a8": 2e-2, "w8a8-sparse24": 2e-2, "fp8": 1e-2}
FORMATS = ["w4a16", "w8a16", "w8a8", "fp8", "sparse24", "w8a8-sparse24", "w8a16-sparse24", "vptq"]
TOKENS = (1, 2, 8, 16, 64)


def _one_layer_8b(monkeypatch) -> str:
    """Llama-3-8B with one decoder layer (its layer shapes, a fraction of its memory) as a synthetic arch."""
    from compress.bench import e2e_synthetic

    cfg = dict(e2e_synthetic.ARCHS["llama-3-8b"], num_hidden_layers=1)
    monkeypatch.setitem(e2e_synthetic.ARCHS, "llama-3-8b-1layer", cfg)
    return "llama-3-8b-1layer"


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float().cpu(), b.float().cpu()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm())


@pytest.fixture(autouse=True)
def _first_gpu_current():
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0, "a kernel call left another device current"


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_path_runs_on_the_second_gpu(fmt, monkeypatch):
    import compress.runtime as rt
    from compress.bench.e2e_synthetic import build_synthetic

    model = build_synthetic(_one_layer_8b(monkeypatch), fmt, SECOND, backend="kernel")
    layers = {n: m for n, m in model.named_modules() if isinstance(m, rt.QuantLinear)}
    assert layers and {m.backend for m in layers.values()} == {"kernel"}
    g = torch.Generator().manual_seed(0)
    bad, ran = [], 0
    for name, mod in layers.items():
        for m in TOKENS:
            x = torch.randn(m, mod.in_features, generator=g).half().to(SECOND)
            with rt.reference_backend(mod):
                ref = mod(x)
            for path, fn in mod.kernel_paths(x):
                try:
                    y = fn()
                    torch.cuda.synchronize(SECOND)
                    err = _rel(y, ref)
                except Exception as e:  # noqa: BLE001  (every path is reported, not only the first failure)
                    bad.append(f"{name} M={m} {path}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                    continue
                ran += 1
                if not err < TOL.get(fmt, 2e-3):
                    bad.append(f"{name} M={m} {path}: relative error {err:.3g}")
            y = mod(x)  # the path the path table chose, through the layer's forward
            torch.cuda.synchronize(SECOND)
            if not _rel(y, ref) < TOL.get(fmt, 2e-3):
                bad.append(f"{name} M={m} forward: relative error {_rel(y, ref):.3g}")
    assert not bad, f"{len(bad)} of {ran + len(bad)} path calls failed on {SECOND}:\n" + "\n".join(bad)


@pytest.mark.parametrize("fmt", ["w4a16", "w8a8"])
def test_generation_with_cuda_graphs_on_the_second_gpu(fmt, monkeypatch):
    from compress.bench.e2e_synthetic import build_synthetic
    from compress.runtime.generate import Generator

    model = build_synthetic(_one_layer_8b(monkeypatch), fmt, SECOND, backend="kernel")
    gen = Generator(model, batch=1, input_len=16, output_len=8, engine="fast", cuda_graphs=True)
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(1)).to(SECOND)
    gen.warmup(ids)
    assert gen.graph_note == "on"
    graphed = gen.run(ids).tokens
    assert torch.equal(graphed, gen.eager_tokens(ids))
