"""The CUDA C++ launchers' host side (session 39): the stream handle they pass on (kernels.cuda_build.stream_handle) is
torch's current stream, on the default stream and inside `torch.cuda.stream`; and the occupancy / shared-memory
answers they now ask the runtime once (kernels/csrc/launch_ex.cuh `resident_ctas`) stay right when one kernel
alternates between shared-memory sizes (layers of another K) and between devices' worth of keys."""

import pytest
import torch

from kernels import cuda_build, w4a16_cc, w4a16_ws, w4a16_ws_gemm
from kernels.cases import make_int4
from kernels.w4a16 import w4a16_linear_ref

from tests.test_w4a16_cc import TOL, gpu, rel_err


@gpu
def test_stream_handle_is_the_current_stream_also_on_a_side_stream():
    dev = torch.device("cuda")
    assert cuda_build.stream_handle(dev) == torch.cuda.current_stream(dev).cuda_stream
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert cuda_build.stream_handle(dev) == s.cuda_stream
        assert cuda_build.stream_handle(torch.device("cuda", torch.cuda.current_device())) == s.cuda_stream
    assert cuda_build.stream_handle(dev) == torch.cuda.current_stream(dev).cuda_stream


@gpu
def test_a_launch_on_a_side_stream_runs_there():
    """The input is written on a side stream after a long sleep there; a GEMV launched on that stream reads it, one
    launched on the default stream instead would read the zeros before it (and return zeros)."""
    n, k = 4096, 4096
    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=2)
    x = torch.randn(1, k, device="cuda").half()
    want = w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)
    late = torch.zeros_like(x)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        late.copy_(x)
        outs = [f(late, p["qweight"], p["scales"], None, 128) for f in (w4a16_ws.w4a16_ws_gemv, w4a16_cc.w4a16_cc_gemv)]
    s.synchronize()
    for out in outs:
        assert rel_err(out, want) < TOL[torch.float16]


@gpu
@pytest.mark.parametrize("module", ["ws", "cc", "ws_gemm"])
def test_shared_memory_sizes_alternate_between_layers(module):
    """One kernel build, layers whose K needs less and more than 48 KB of shared memory, in turns: each launch still
    finds its limit raised (the remembered limit only grows) and its resident-CTA count for its own size."""
    layers = [(4096, 1024), (1024, 14336), (4096, 4096), (1024, 28672), (4096, 1024), (1024, 14336)]
    for i, (n, k) in enumerate(layers * 2):
        p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=i)
        m = 4 if module == "ws_gemm" else 1
        x = torch.randn(m, k, device="cuda").half()
        if module == "ws":
            out = w4a16_ws.w4a16_ws_gemv(x, p["qweight"], p["scales"], None, 128)
        elif module == "cc":
            out = w4a16_cc.w4a16_cc_gemv(x, p["qweight"], p["scales"], None, 128)
        else:
            out = w4a16_ws_gemm.w4a16_ws_gemm(x, p["qweight"], p["scales"], None, 128)
        assert rel_err(out, w4a16_linear_ref(x, p["qweight"], p["scales"], None, 128)) < TOL[torch.float16], (n, k)
