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
