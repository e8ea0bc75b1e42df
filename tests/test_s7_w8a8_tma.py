"""The TMA / persistent int8 GEMM (kernels/w8a8_gemm_tma.py) vs the plain-torch reference and vs the pointer GEMM.

On CPU the Triton interpreter runs the same kernel (its TensorDescriptor loads zero-fill past the edges like TMA);
warp specialization is a compile-time schedule and is checked by compiling for sm_90 here."""

import pytest
import torch

from kernels.cases import LLAMA_SHAPES, TEST_SHAPES_W8A8, make_w8a8
from kernels.w8a8 import _config, _launch, w8a8_linear, w8a8_linear_ref

from tests.test_kernels_w8a8 import DEVICE, TOL, check_chained_in_a_cuda_graph, compile_for_the_h100, rel_err

POINTER = {"BM": 16, "BN": 16, "BK": 32, "num_warps": 4, "fused": False, "split": 1}  # session 5's GEMM, no split-K
CONFIGS = {
    "plain": {"kind": "tma", "BM": 16, "BN": 16, "BK": 32},
    "swap": {"kind": "tma", "BM": 16, "BN": 32, "BK": 32, "swap": True},
    "split": {"kind": "tma", "BM": 16, "BN": 32, "BK": 64, "split": 2, "progs": 3},  # fewer programs than tiles
    "swap-split": {"kind": "tma", "BM": 16, "BN": 16, "BK": 32, "split": 3, "swap": True},
}
SHAPES = TEST_SHAPES_W8A8 + [(33, 72, 96)]  # odd M and N, K not a multiple of BK, N below one tile


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_tma_gemm_matches_reference(shape, dtype, name):
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    out = _launch(x, wq, ws, CONFIGS[name])
    assert out.shape == (m, n) and out.dtype == dtype
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[dtype]


@pytest.mark.parametrize("name", ["plain", "swap"])
@pytest.mark.parametrize("shape", SHAPES)
def test_tma_gemm_equals_the_pointer_gemm_bitwise(shape, name):
    # Same quantized x, exact int32 sums, the same fp32 epilogue (acc * s_w * s_x): without split-K the two GEMMs
    # must agree to the bit, whatever the tiles and operand order.
    # The CPU interpreter evaluates the epilogue in NumPy, where a load's fp32 values can be promoted to fp64 and
    # the product is then rounded once instead of twice: at an exact fp16 tie (a few elements in 10^4 here) the two
    # kernels may then round apart by one fp16 step. On the GPU (fp32 arithmetic throughout) they must be equal.
    m, n, k = shape
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).half()
    ours, pointer = _launch(x, wq, ws, CONFIGS[name]), _launch(x, wq, ws, POINTER)
    if DEVICE == "cuda":
        assert torch.equal(ours, pointer)
    else:
        step = torch.finfo(torch.float16).eps * pointer.float().abs().clamp(min=2**-14)  # one fp16 step at the value
        assert ((ours.float() - pointer.float()).abs() <= step).all()
        assert (ours != pointer).float().mean() < 0.01


def test_tma_config_falls_back_for_a_weight_tma_cannot_take():
    # A strided (non-contiguous) weight cannot be described to TMA: the launcher runs the pointer GEMM instead.
    wq, ws = make_w8a8(24, 128, DEVICE, seed=3)
    wide = torch.zeros(24, 256, dtype=torch.int8, device=DEVICE)
    wide[:, :128] = wq
    strided = wide[:, :128]
    x = torch.randn(40, 128, device=DEVICE).half()
    out = _launch(x, strided, ws, CONFIGS["plain"])
    assert torch.equal(out, _launch(x, wq, ws, POINTER))


_AOT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels.w8a8_gemm_tma as t

fn = t._w8a8_tma_kernel
for ws, swap, split in ((True, False, False), (True, True, False), (False, False, True)):
    consts = dict(BM=64 if swap else 128, BN=128, BK=128, WARP_SPEC=ws, SWAP=swap, SPLIT_K=split, PDL=True)
    ptrs = dict(x_desc="tensordesc<i8[%d, 128]>" % consts["BM"], w_desc="tensordesc<i8[128, 128]>", sx_ptr="*fp32",
                sw_ptr="*fp32", out_ptr="*bf16", ws_ptr="*fp32", lock_ptr="*i32")
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 4}).asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, (ws, swap, split)
    # warp_specialize on Hopper gives the producer and consumer warps their own register budgets
    assert ("setmaxnreg" in ptx) == ws, (ws, swap, split)
print("compiled 3")
"""


def test_tma_gemm_compiles_to_wgmma_and_tma_for_the_h100():
    """The interpreter accepts code the GPU compiler rejects: compile the warp-specialized, swapped and split-K
    variants for sm_90 here, without a GPU, and check they use the tensor cores (wgmma), the bulk tensor copy
    engine, and (warp-specialized) per-role register budgets."""
    compile_for_the_h100(_AOT, "compiled 3")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [32, 64, 256, 1024])
@pytest.mark.parametrize("name,n,k", LLAMA_SHAPES)
def test_tma_default_real_shapes_gpu(name, n, k, m, dtype):
    # What the runtime serves at this M on every Llama-3 shape, both output dtypes: the pointer GEMM today, the TMA
    # GEMM where `_config` (or COMPRESS_KERNEL_CONFIGS) picks it.
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k)
    x = torch.randn(m, k, device=DEVICE).to(dtype)
    out = w8a8_linear(x, wq, ws)
    assert rel_err(out, w8a8_linear_ref(x, wq, ws)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cfg", [dict(CONFIGS["plain"], BM=128, BN=128, BK=128, ws=True, pdl=1),
                                 dict(CONFIGS["split"], BM=128, BN=128, BK=128, split=4, progs=None, pdl=1),
                                 dict(CONFIGS["swap"], BM=64, BN=128, BK=128, ws=True)], ids=["ws-pdl", "split-pdl", "swap"])
def test_tma_gemm_in_a_cuda_graph_gpu(cfg):
    # Layers back to back in one graph (PDL: each GEMM waits for its quantizer), fresh activations per replay.
    check_chained_in_a_cuda_graph(200, cfg, depth=3)


def test_config_kinds_are_known():
    # Every M the runtime serves gets a config its launcher understands.
    for m in (1, 2, 8, 16, 17, 32, 64, 65, 256, 1024, 4096):
        cfg = _config(m)
        assert cfg.get("kind", "int8-gemm") in ("gemv", "tma", "int8-gemm"), (m, cfg)
        assert "BK" in cfg or cfg.get("kind") == "gemv"
