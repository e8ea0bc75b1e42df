"""The CUDA C++ few-token VPTQ kernel (kernels/vptq_gemm_cuda.py, kernels/csrc/vptq_gemm.cu): its build and plan on
any machine with nvcc, and on the GPU every covered call against the contract's reference, repeatable bytes, every
split of K, and CUDA-graph replay."""

import ctypes

import pytest
import torch

from kernels import cuda_build, vptq_gemm_cuda
from kernels.cases import make_vptq, rel_err
from kernels.vptq import vptq_gemm, vptq_linear_ref

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.skipif(cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("vptq_gemm")
def test_source_compiles_for_the_h100(sm90_library):
    """Builds for sm_90a with this machine's nvcc (no GPU needed); the exported sizes are what the launcher assumes."""
    lib = ctypes.CDLL(str(sm90_library))
    vptq_gemm_cuda._bind(lib)
    # Main codebook room for every index, 8 residual copies; two CTAs fit an H100 SM at 4096 / 256 centroids.
    assert lib.vptq_gemm_smem_bytes(13, 9) == vptq_gemm_cuda.smem_bytes(13, 9) == (16 << 13) + (8 * 16 << 9)
    assert lib.vptq_gemm_smem_bytes(12, 0) == 16 << 12
    assert 2 * (vptq_gemm_cuda.smem_bytes(12, 8) + 1024) <= 228 * 1024
    # Partials: 512-output tiles x slices x tokens, then the x sums (slices x tokens).
    assert lib.vptq_gemm_workspace_floats(5, 1088, 3) == 3 * 3 * 5 * 512 + 3 * 5
    # Refused without a launch: 65 tokens, N not a multiple of 64, K not of 16, more slices than 16-column steps.
    null = None
    for m, n, k, s in ((65, 64, 16, 1), (1, 72, 16, 1), (1, 64, 24, 1), (1, 64, 32, 3)):
        assert lib.vptq_gemm(null, 0, m, null, null, 4096, 12, null, null, 0, 0, null, null, null, null, n, k, 1, 1, s,
                             null) == -1


def test_plan_fills_the_gpu_without_slicing_k_too_thin():
    sms = 132
    for m, n, k in ((1, 4096, 4096), (8, 1024, 4096), (64, 14336, 4096), (16, 28672, 8192), (2, 64, 32)):
        s = vptq_gemm_cuda.plan(m, n, k, sms, 12, 8)
        tiles = -(-n // vptq_gemm_cuda.TILE_N)
        assert 1 <= s <= max(1, k // 64), (m, n, k, s)
        assert tiles * s <= 2 * sms + tiles, (m, n, k, s)
    # Fewer output tiles get more slices of K.
    assert vptq_gemm_cuda.plan(8, 1024, 4096, sms, 12, 8) > vptq_gemm_cuda.plan(8, 14336, 4096, sms, 12, 8)


def test_split_candidates_include_one_and_two_waves_of_ctas():
    """8B gate/up at 64 tokens (28 tiles of 512 outputs, one CTA an SM): the plan's 5 slices make 140 CTAs on 132
    SMs; the candidates add 4 (one wave) and 9 (two waves). Every candidate is a valid slicing of K."""
    assert vptq_gemm_cuda.split_candidates(64, 14336, 4096, 132, 12, 8) == [4, 5, 9]
    for m, n, k in ((1, 1024, 4096), (16, 4096, 14336), (64, 64, 32), (32, 28672, 8192)):
        cands = vptq_gemm_cuda.split_candidates(m, n, k, 132, 13, 9)
        assert cands == sorted(set(cands)) and all(1 <= s <= k // 16 for s in cands), (m, n, k, cands)
        assert vptq_gemm_cuda.plan(m, n, k, 132, 13, 9) in cands


def test_covers_nothing_off_the_gpu_so_the_triton_kernel_serves():
    d = make_vptq(64, 32, 4096, 256, "cpu")
    x = torch.randn(2, 32).half()
    assert not vptq_gemm_cuda.covers(x, 64, d["codebook"], 12, d["res_codebook"], 8, d["scale"], d["bias"])


def _cuda(x, n, d, split=None):
    out = torch.full((x.shape[0], n), float("nan"), device=x.device, dtype=x.dtype)
    return vptq_gemm_cuda.gemm(x, n, d["indices"], d["codebook"], d["index_bits"], d.get("res_indices"),
                               d.get("res_codebook"), d.get("res_index_bits"), d.get("scale"), d.get("bias"), out, split)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [1, 5, 16, 17, 40, 64])
@pytest.mark.parametrize("n,k,main,res,dtype", [
    (4096, 4096, 4096, 256, torch.float16),
    (1024, 4096, 8192, 512, torch.bfloat16),
    (14336, 4096, 4096, 0, torch.float16),
    (576, 48, 8192, 256, torch.bfloat16),  # a partial 512-output tile, three 16-column steps
])
def test_matches_reference_and_repeats_bytes(n, k, main, res, dtype, m):
    d = make_vptq(n, k, main, res, "cuda", seed=m + n)
    x = torch.randn(m, k, device="cuda").to(dtype)
    assert vptq_gemm_cuda.supports(x, n, d["codebook"], d["index_bits"], d.get("res_codebook"), d.get("res_index_bits"),
                                   d["scale"], d["bias"])
    out = vptq_gemm(x, n, **d)  # the public op: served by the CUDA kernel for these calls
    assert rel_err(out, vptq_linear_ref(x, n, **d)) < (3e-3 if dtype == torch.float16 else 6e-3)
    assert torch.equal(out, vptq_gemm(x, n, **d))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("scale,bias", [(False, False), (True, False), (False, True)])
def test_every_split_of_k_and_optional_scale_bias(scale, bias):
    n, k, m = 1024, 1024, 9
    d = make_vptq(n, k, 4096, 256, "cuda", seed=3, scale=scale, bias=bias)
    x = torch.randn(m, k, device="cuda").half()
    ref = vptq_linear_ref(x, n, **d)
    for split in (1, 3, 7, k // 16):
        out = _cuda(x, n, d, split)
        assert rel_err(out, ref) < 3e-3, split
        assert torch.equal(out, _cuda(x, n, d, split)), split


@pytest.mark.gpu
@needs_cuda
def test_graph_replay_reads_new_activations():
    n, k, m = 4096, 4096, 8
    d = make_vptq(n, k, 4096, 256, "cuda", seed=4)
    x = torch.randn(m, k, device="cuda").half()
    vptq_gemm(x, n, **d)  # builds and sizes the workspace outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = vptq_gemm(x, n, **d)
    for seed in (1, 2):
        x.copy_(torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)).half())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, vptq_gemm(x, n, **d)), seed
