"""W4A16 tensor-core tiles under programmatic dependent launch (session 13): config keys "pdl" / "chain".

CPU: how a config maps to the kernel's PDL constexprs, the same results through the interpreter (which ignores PDL),
and an sm_90 compile of every PDL form (the interpreter accepts code the GPU compiler rejects). GPU: layers chained in
one CUDA graph, each on the previous layer's output, so a call that read x or touched the shared split-K buffers
before its wait would read stale data or corrupt a neighbour's sum.
"""

import pytest
import torch

from kernels.cases import make_int4, rel_err
from kernels.w4a16 import _launch, _pdl, w4a16_linear_ref
from tests.test_kernels_w8a8 import compile_for_the_h100

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TC = {"kind": "tc", "BM": 16, "BN": 64, "NB": 2, "num_warps": 4, "num_stages": 3}


def test_pdl_config_maps_to_whole_lines_within_the_chunk(monkeypatch):
    dev = torch.device("cuda")
    monkeypatch.setattr("kernels.w4a16.pdl_enabled", lambda d: True)
    assert _pdl(TC, 4096, dev) == (0, 0, 0)  # no key: a plain launch
    assert _pdl(TC | {"pdl": 0}, 4096, dev) == (1, 0, 0)  # wait only
    assert _pdl(TC | {"pdl": 2048, "chain": 1}, 4096, dev) == (1, 1, 16)
    assert _pdl(TC | {"pdl": 3000, "chain": "late"}, 4096, dev) == (1, 2, 16)  # rounded down to a power of two of lines
    assert _pdl(TC | {"pdl": 4096}, 512, dev) == (1, 0, 4)  # never more than the program's own K chunk
    assert _pdl(TC | {"chain": 1}, 512, dev) == (0, 1, 0)  # lets the next kernel start, itself launched plainly
    monkeypatch.setattr("kernels.w4a16.pdl_enabled", lambda d: False)  # CPU, interpreter, before sm_90, or switched off
    assert _pdl(TC | {"pdl": 2048, "chain": 1}, 4096, dev) == (0, 0, 0)


def test_pdl_is_off_in_the_interpreter_and_on_request(monkeypatch):
    from kernels._common import pdl_enabled
    assert not pdl_enabled(torch.device("cpu"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not pdl_enabled(torch.device("cuda"))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("COMPRESS_DECODE_PDL", "0")
    assert not pdl_enabled(torch.device("cuda"))


@pytest.mark.parametrize("cfg", [TC | {"pdl": 2048, "chain": 1, "split": 2}, TC | {"pdl": 0, "chain": "late"}])
def test_pdl_configs_give_the_reference_result(cfg):
    p = make_int4(96, 384, 128, True, torch.float16, DEVICE, seed=3)
    x = torch.randn(5, 384, device=DEVICE).half()
    got = _launch(x, p["qweight"], p["scales"], None, 128, cfg)
    assert rel_err(got, w4a16_linear_ref(x, p["qweight"], p["scales"])) < 2e-3


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.w4a16 as w4

fn = w4._w4a16_tc_kernel
ptrs = dict(x_ptr="*fp16", q_ptr="*i32", s_ptr="*fp16", z_ptr="*u8", out_ptr="*fp16", ws_ptr="*fp32", lock_ptr="*i32")
base = dict(GROUP=128, ASYM=False, IS_BF16=False, DOT_F32=False, USE_ASM=True, BN=128, BM=16, NB=2, ROUND=4)
n = 0
for pdl, lines, chain in ((1, 16, 1), (1, 0, 2), (0, 0, 1)):
    consts = base | dict(PDL=pdl, PDL_LINES=lines, CHAIN=chain)
    sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3}).asm["ptx"]
    assert ("griddepcontrol.wait" in ptx) == bool(pdl), (pdl, lines, chain)
    assert ("prefetch.global.L2" in ptx) == (lines > 0), (pdl, lines, chain)
    assert "griddepcontrol.launch_dependents" in ptx and "wgmma" in ptx, (pdl, lines, chain)
    n += 1
print("compiled", n)
"""


def test_pdl_tiles_compile_for_the_h100():
    compile_for_the_h100(_AOT, "compiled 3")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cfg", [{"pdl": 2048, "chain": 1}, {"pdl": 0, "chain": "late"}, {"pdl": 1024}],
                         ids=["prefetch-chain", "wait-late", "prefetch"])
@pytest.mark.parametrize("m", [16, 64])
def test_pdl_tiles_chained_in_a_cuda_graph_gpu(m, cfg):
    """Four 4096 x 4096 layers back to back in one graph, each on the previous output, split K (shared workspace and
    counters): every replay gets fresh activations and every layer must match the reference on its actual input."""
    tile = {"kind": "tc", "BM": min(m, 64), "BN": 128, "NB": 2, "num_warps": 8, "num_stages": 3, "split": 4} | cfg
    layers = [make_int4(4096, 4096, 128, True, torch.float16, DEVICE, seed=i) for i in range(4)]
    x = torch.randn(m, 4096, device=DEVICE).half()
    _launch(x, layers[0]["qweight"], layers[0]["scales"], None, 128, tile)  # compile outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [x]
        for p in layers:
            outs.append(_launch(outs[-1], p["qweight"], p["scales"], None, 128, tile))
    for _ in range(3):
        x.copy_(torch.randn_like(x) * 0.1)
        g.replay()
        torch.cuda.synchronize()
        for i, p in enumerate(layers):
            assert rel_err(outs[i + 1], w4a16_linear_ref(outs[i], p["qweight"], p["scales"])) < 2e-3
