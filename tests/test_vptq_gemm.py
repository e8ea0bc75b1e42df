"""The few-token VPTQ kernel (`kernels.vptq.vptq_gemm`) against the contract's reference, on the CPU in Triton's
interpreter (small and odd shapes) and on the GPU with model shapes; and the runtime offering it."""

import pytest
import torch

from compress.errors import CompressError
from kernels import vptq
from kernels.cases import make_vptq, rel_err
from kernels.vptq import vptq_gemm, vptq_linear_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("m,n,k,main,res,scale,bias", [
    (2, 128, 64, 4096, 256, True, True),
    (3, 136, 40, 8192, 512, True, True),      # N not a whole tile, K not a whole step
    (17, 64, 33, 4096, 0, False, True),       # 32-row tile, no residual, K odd
    (40, 256, 96, 65536, 0, True, False),     # 64-row tile, 16-bit indices
    (64, 64, 32, 4096, 256, False, False),
])
def test_few_token_kernel_matches_reference(m, n, k, main, res, scale, bias):
    d = make_vptq(n, k, main, res, DEVICE, seed=m * n + k, scale=scale, bias=bias)
    x = torch.randn(m, k, device=DEVICE).half()
    out = vptq_gemm(x, n, **d)
    assert out.shape == (m, n) and out.dtype == torch.float16
    assert rel_err(out, vptq_linear_ref(x, n, **d)) < 3e-3


@pytest.mark.parametrize("split", [2, 3])
def test_few_token_kernel_split_k_is_exact_and_leaves_counters_clean(split):
    n, k, m = 128, 200, 5
    d = make_vptq(n, k, 4096, 256, DEVICE, seed=split)
    x = torch.randn(m, k, device=DEVICE).bfloat16()
    ref = vptq_linear_ref(x, n, **d)
    outs = []
    for _ in range(2):  # the second call would sum stale partials if the tile counters were left non-zero
        out = torch.full((m, n), float("nan"), device=DEVICE, dtype=x.dtype)
        vptq._gemm(x, n, d["indices"], d["codebook"], d["index_bits"], d["res_indices"], d["res_codebook"],
                   d["res_index_bits"], d["scale"], d["bias"], out, config={"split": split})
        outs.append(out)
    assert rel_err(outs[0], ref) < 1.2e-2
    assert torch.equal(outs[0], outs[1])


def test_few_token_kernel_says_what_it_does_not_take():
    d = make_vptq(64, 32, 4096, 256, DEVICE)
    with pytest.raises(CompressError, match="65 tokens"):
        vptq_gemm(torch.randn(65, 32, device=DEVICE).half(), 64, **d)
    with pytest.raises(CompressError, match="float16 or bfloat16"):
        vptq_gemm(torch.randn(2, 32, device=DEVICE), 64, **d)
    with pytest.raises(CompressError, match="indices"):
        vptq_gemm(torch.randn(2, 32, device=DEVICE).half(), 128, **d)
    x = torch.randn(2, 32, device=DEVICE).half()
    assert vptq.gemm_supported(x, d["codebook"]) is None
    assert "outlier" in vptq.gemm_supported(x, d["codebook"], torch.tensor([3], device=DEVICE))


def test_few_token_kernel_opcheck():
    d = make_vptq(64, 16, 4096, 256, DEVICE)
    x = torch.randn(3, 16, device=DEVICE).half()
    args = (x, 64, d["indices"], d["codebook"], d["index_bits"], d["res_indices"], d["res_codebook"], d["res_index_bits"],
            d["scale"], d["bias"])
    torch.library.opcheck(torch.ops.compress.vptq_gemm, args, test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("m", [2, 8, 16, 33, 64])
@pytest.mark.parametrize("n,k,main,res", [(4096, 4096, 4096, 256), (14336, 4096, 8192, 512), (4096, 14336, 65536, 0)])
def test_few_token_kernel_real_shapes_gpu(n, k, main, res, m):
    d = make_vptq(n, k, main, res, DEVICE)
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(vptq_gemm(x, n, **d), vptq_linear_ref(x, n, **d)) < 3e-3


_AOT = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.vptq import _vptq_gemm_kernel as fn

ptrs = dict(x_ptr="*fp16", idx_ptr="*i32", cb_ptr="*fp16", ridx_ptr="*i32", rcb_ptr="*fp16", s_ptr="*fp16",
            t_ptr="*fp16", out_ptr="*fp16", ws_ptr="*fp32", lock_ptr="*i32")
n = 0
for bm, res, x in ((16, True, "*fp16"), (64, False, "*bf16")):
    consts = dict(B=12, RB=8, V=8, HAS_RES=res, HAS_SCALE=True, HAS_BIAS=True, BM=bm, BG=16, BJ=32, DOT_F32=False)
    types = dict(ptrs, x_ptr=x, out_ptr=x)
    sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert "mma" in k.asm["ptx"], "the dot is not on the tensor cores"
    n += 1
print("compiled", n)
"""


def test_few_token_kernel_compiles_for_the_h100():
    """The CPU interpreter accepts code the GPU compiler rejects (and runs bf16 dots another way): compile the kernel
    for sm_90 without a GPU, fp16 and bf16, 16- and 64-row tiles, and check that its dot is a tensor-core mma."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", _AOT], capture_output=True, text=True, env=env, timeout=300)
    if "ptxas" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("this Triton install has no ptxas")
    assert r.returncode == 0 and "compiled 2" in r.stdout, r.stderr[-2000:]


def test_runtime_offers_the_few_token_kernel_and_every_path_agrees():
    """The runtime's VPTQ layer: `vptq_linear` first at every M; the few-token kernel beside it from 1 to 64 tokens
    (the path table keeps the faster on the GPU); not with outlier columns; every path computes the reference."""
    from compress.runtime import kernel_bridge as kb
    from compress.runtime.formats_compress import VPTQLinear
    from compress.runtime.spec import LayerSpec

    n, k = 64, 48
    d = make_vptq(n, k, 4096, 256, "cpu", seed=5)
    tensors = {"vptq_indices": d["indices"], "vptq_codebook": d["codebook"], "vptq_res_indices": d["res_indices"],
               "vptq_res_codebook": d["res_codebook"], "vptq_scale": d["scale"], "vptq_bias": d["bias"]}
    args = {"vector_len": 8, "index_bits": d["index_bits"], "res_index_bits": d["res_index_bits"], "shape": [n, k]}
    spec = LayerSpec("l", "compress.vptq", k, n, args=args)
    mod = VPTQLinear.from_checkpoint(spec, tensors, device=torch.device(DEVICE), dtype=torch.float16)
    with kb.allow_interpreter():
        assert VPTQLinear.kernel_unavailable(torch.device(DEVICE), spec) is None
        mod.use_kernel()
        g = torch.Generator().manual_seed(6)
        for m, names in ((1, ["kernel", "fused_gemm"]), (2, ["kernel", "fused_gemm"]), (17, ["kernel", "fused_gemm"]),
                         (64, ["kernel", "fused_gemm"]), (65, ["kernel"])):
            x = torch.randn(m, k, generator=g).half().to(DEVICE)
            paths = mod.kernel_paths(x)
            # On a GPU the CUDA kernel comes once per slicing of K worth timing (fused_gemm_k<S>).
            assert list(dict.fromkeys(p.split("_k")[0] for p, _ in paths)) == names, m
            ref = mod.reference(x)
            for name, fn in paths:
                assert rel_err(fn(), ref) < 3e-3, (m, name)
