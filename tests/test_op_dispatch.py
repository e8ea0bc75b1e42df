"""The kernels' public functions call their launcher directly in eager PyTorch and their torch custom op wherever torch
needs the op (kernels/op_dispatch.py): the same bytes either way, the op's errors and fakes where they were."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from compress.errors import CompressError
from kernels.cases import make_int4, make_w8a8
from kernels.op_dispatch import direct_call
from kernels.w4a16 import w4a16_linear
from kernels.w8a8 import w8a8_linear

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_plain_eager_tensors_go_direct_and_the_rest_through_the_op():
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    assert direct_call(x, w, None, 3)
    assert direct_call(x, torch.nn.Parameter(w, requires_grad=False))
    g = torch.randn(2, 8, requires_grad=True)
    assert not direct_call(x, g)  # autograd would record the call: the op refuses a backward it does not have
    with torch.no_grad():
        assert direct_call(x, g)
    with torch.inference_mode():
        assert direct_call(torch.randn(2, 8))
    with FakeTensorMode() as mode:
        assert not direct_call(mode.from_tensor(x))


def test_traced_calls_go_through_the_op():
    x = torch.randn(2, 8)
    seen = []

    def f(t):
        seen.append(direct_call(t))  # runs while dynamo traces (and only then: the compiled graph has no Python)
        return t + 1

    torch.compile(f, backend="eager", fullgraph=True)(x)
    assert seen == [False]


@pytest.mark.parametrize("m", [1, 5])
def test_direct_and_op_calls_give_the_same_bytes(m):
    p = make_int4(64, 256, 128, False, torch.float16, DEVICE, seed=3)
    x = torch.randn(m, 256, device=DEVICE).half()
    direct = w4a16_linear(x, p["qweight"], p["scales"], p["zeros"], 128)
    via_op = torch.ops.compress.w4a16_linear(x, p["qweight"], p["scales"], p["zeros"], 128)
    assert torch.equal(direct, via_op)
    q, s = make_w8a8(64, 256, DEVICE, seed=3)
    assert torch.equal(w8a8_linear(x, q, s), torch.ops.compress.w8a8_linear(x, q, s))


def test_an_input_that_requires_grad_still_meets_the_op():
    """The op path is kept for autograd: its output has a grad_fn, and asking for a backward fails loudly (no
    formula) instead of the direct path's silent tensor without one."""
    p = make_int4(64, 256, 128, True, torch.float16, DEVICE, seed=4)
    x = torch.randn(1, 256, device=DEVICE).half().requires_grad_()
    y = w4a16_linear(x, p["qweight"], p["scales"], None, 128)
    assert y.grad_fn is not None
    with pytest.raises(RuntimeError):
        y.float().sum().backward()


def test_errors_reach_the_caller_as_they_were():
    p = make_int4(64, 256, 128, True, torch.float16, DEVICE)
    with pytest.raises(CompressError, match="float16 or bfloat16"):
        w4a16_linear(torch.randn(1, 256, device=DEVICE), p["qweight"], p["scales"])


@pytest.mark.parametrize("value, want", [("op", "False"), ("direct", "True"), ("opp", "COMPRESS_KERNEL_DISPATCH='opp' is not")])
def test_the_environment_switch_sends_every_call_through_the_op(value, want):
    import os
    import subprocess
    import sys

    code = "import torch; from kernels.op_dispatch import direct_call; print(direct_call(torch.ones(1)))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "COMPRESS_KERNEL_DISPATCH": value})
    assert want in (res.stdout + res.stderr)


# Every function that launches a kernel and is called with tensors of a model (a runtime layer's paths, the fast engine's
# glue): each must make its tensors' GPU current first (tests/test_second_gpu.py runs them on a second GPU).
LAUNCHERS = {
    "kernels.w4a16": ["dequantize_w4a16", "w4a16_linear"],
    "kernels.w4a16_cuda": ["w4a16_gemv", "w4a16_gemv_silu_mul", "w4a16_gemv_rms_norm"],
    "kernels.w4a16_cc": ["w4a16_cc_gemv"],
    "kernels.w4a16_ws": ["w4a16_ws_gemv"],
    "kernels.w4a16_ws_gemm": ["w4a16_ws_gemm"],
    "kernels.w8a8": ["quantize_per_token", "w8a8_linear"],
    "kernels.w8a8_gemm_tma": ["launch"],
    "kernels.i8_gemv": ["launch_quantized", "w8a8_gemv", "sparse24_w8a8_gemv"],
    "kernels.sp24_w16_gemv": ["launch", "sparse24_w8a16_gemv"],
    "kernels.sparse24": ["densify_sparse24", "dequantize_w8a16_sparse24", "sparse24_linear", "sparse24_linear_tiled",
                         "sparse24_w8a8_linear", "sparse24_w8a16_linear", "sparse24_w8a16_linear_tiled"],
    "kernels.vptq": ["vptq_linear", "vptq_gemm", "vptq_dequantize"],
    "kernels.vptq_cluster": ["gemv"],
    "kernels.vptq_cuda": ["gemv"],
    "kernels.vptq_gemm_cuda": ["gemm"],
    "compress.runtime.decode_kernels": ["gemv", "gemv_w8", "gemm_w8", "dequant_w8", "add_rms_norm", "silu_mul",
                                        "silu_mul_quant", "gemv_i8", "DecodeAttention.__call__"],
    "compress.runtime.w8a16_prefill": ["gemm_w8_tiled"],
    "compress.runtime.qlinear": ["QuantLinear.forward"],
    "compress.runtime.fastpath": ["FastLM.prefill", "FastLM.decode"],
    "compress.runtime.generate": ["Generator.warmup", "Generator.run", "Generator.eager_tokens"],
}


def test_every_launcher_runs_on_its_tensors_device():
    import importlib

    from kernels.op_dispatch import on_input_device

    guard = on_input_device(lambda: None).__code__
    missing = []
    for module, names in LAUNCHERS.items():
        mod = importlib.import_module(module)
        for name in names:
            obj = mod
            for part in name.split("."):
                obj = getattr(obj, part)
            if getattr(obj, "__code__", None) is not guard or not hasattr(obj, "__wrapped__"):
                missing.append(f"{module}.{name}")
    assert not missing, f"not wrapped by kernels.op_dispatch.on_input_device: {missing}"


def test_on_input_device_passes_calls_through():
    from kernels.op_dispatch import on_input_device

    @on_input_device
    def scaled(n: int, x: torch.Tensor, *, by: float = 2.0) -> torch.Tensor:
        """doc"""
        return x[:n] * by

    assert scaled.__name__ == "scaled" and scaled.__doc__ == "doc"
    assert torch.equal(scaled(2, torch.ones(3), by=3.0), torch.full((2,), 3.0))  # the tensor need not come first
    assert scaled.__wrapped__(1, torch.ones(1)).item() == 2.0


def test_on_input_device_traces_under_torch_compile():
    from kernels.op_dispatch import on_input_device

    @on_input_device
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    x = torch.randn(4, device=DEVICE)
    assert torch.equal(torch.compile(f, backend="eager", fullgraph=True)(x), x * 2 + 1)
