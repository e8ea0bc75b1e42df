"""VPTQ kernels vs our contract-based reference decoder, and vs compress/vptq/format.py's official one."""

import pytest
import torch

from compress.errors import CompressError
from kernels.cases import TEST_CASES_VPTQ, make_vptq, pack_bits
from kernels.vptq import (
    unpack_indices_ref,
    vptq_dequantize,
    vptq_dequantize_ref,
    vptq_linear,
    vptq_linear_ref,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def rel_err(a, b):
    assert torch.isfinite(a).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("bits", [1, 6, 8, 9, 12, 13, 16])
def test_bit_stream_round_trip(bits):
    idx = torch.randint(0, 2**bits, (5, 37), generator=torch.Generator().manual_seed(bits))
    assert torch.equal(unpack_indices_ref(pack_bits(idx, bits), bits, 37), idx)


@pytest.mark.parametrize("case", TEST_CASES_VPTQ, ids=[str(c) for c in TEST_CASES_VPTQ])
def test_vptq_linear_matches_reference(case):
    m, n, k, main, res, outliers = case
    d = make_vptq(n, k, main, res, DEVICE, seed=n + k, outliers=outliers)
    x = torch.randn(m, k, device=DEVICE).half()
    out = vptq_linear(x, n, **d)
    assert out.shape == (m, n) and out.dtype == torch.float16
    assert rel_err(out, vptq_linear_ref(x, n, **d)) < 3e-3


@pytest.mark.parametrize("scale,bias", [(False, False), (True, False), (False, True)])
def test_vptq_optional_tensors(scale, bias):
    d = make_vptq(32, 16, 4096, 0, DEVICE, seed=3, scale=scale, bias=bias)
    x = torch.randn(1, 16, device=DEVICE).bfloat16()
    assert rel_err(vptq_linear(x, 32, **d), vptq_linear_ref(x, 32, **d)) < 1.2e-2


@pytest.mark.parametrize("case", TEST_CASES_VPTQ[:3] + TEST_CASES_VPTQ[4:5], ids=str)
def test_vptq_dequantize_matches_both_references(case):
    _, n, k, main, res, outliers = case
    d = make_vptq(n, k, main, res, DEVICE, seed=k, outliers=outliers)
    w = vptq_dequantize(n, dtype=torch.float32, **d)
    ours = vptq_dequantize_ref(n, **d)
    assert torch.allclose(w, ours, rtol=1e-6, atol=1e-7)
    fmt = pytest.importorskip("compress.vptq.format")
    vq = fmt.VQWeight(shape=(n, k), vector_len=8, **d)
    assert torch.allclose(fmt.dequantize(vq, torch.float32), ours, rtol=1e-6, atol=1e-7)
    # Our packer and the official one write the same bytes.
    idx = unpack_indices_ref(d["indices"], d["index_bits"], n // 8)
    assert torch.equal(fmt.pack_indices(idx, d["index_bits"]), d["indices"])


def test_vptq_rejects_bad_inputs():
    d = make_vptq(64, 32, 4096, 256, DEVICE)
    x = torch.randn(1, 32, device=DEVICE).half()
    with pytest.raises(CompressError, match="indices"):
        vptq_linear(x, 128, **d)
    with pytest.raises(CompressError, match="in_features"):
        vptq_linear(torch.randn(1, 16, device=DEVICE).half(), 64, **d)
    bad = dict(d, res_codebook=None)
    with pytest.raises(CompressError, match="both"):
        vptq_linear(x, 64, **bad)
    with pytest.raises(CompressError, match="index_bits"):
        vptq_linear(x, 64, **dict(d, index_bits=11))


def test_vptq_opcheck():
    d = make_vptq(64, 16, 4096, 256, DEVICE)
    x = torch.randn(1, 16, device=DEVICE).half()
    args = (x, 64, d["indices"], d["codebook"], d["index_bits"], d["res_indices"], d["res_codebook"], d["res_index_bits"],
            d["scale"], d["bias"], None, None, None, None)
    torch.library.opcheck(torch.ops.compress.vptq_linear, args, test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("m", [1, 4, 16])
@pytest.mark.parametrize("n,k,main,res", [(4096, 4096, 4096, 256), (14336, 4096, 8192, 512), (1024, 16384, 65536, 0)])
def test_vptq_real_shapes_gpu(n, k, main, res, m):
    d = make_vptq(n, k, main, res, DEVICE)
    x = torch.randn(m, k, device=DEVICE).half()
    assert rel_err(vptq_linear(x, n, **d), vptq_linear_ref(x, n, **d)) < 3e-3


# --------------------------------------------------------------------------- CUDA C++ GEMV (GPU only)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_vptq_cuda_declines_cpu_and_unsupported():
    from kernels import vptq_cuda

    d = make_vptq(64, 16, 4096, 256, "cpu")
    x = torch.randn(1, 16).half()
    assert not vptq_cuda.supports(x, 64, d["codebook"], 12, d["res_codebook"], 8, d["scale"], d["bias"])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("n,k,main,res,dtype", [
    (1024, 1024, 4096, 256, torch.float16), (4096, 4096, 8192, 512, torch.float16),
    (14336, 4096, 4096, 512, torch.bfloat16), (1032, 333, 4096, 256, torch.float16),  # odd: partial tiles, short K
    (2056, 100, 8192, 0, torch.float16), (53248, 1024, 8192, 512, torch.float16), (8192, 16384, 8192, 256, torch.float16)])
def test_vptq_cuda_gemv_matches_reference(n, k, main, res, dtype):
    from kernels import vptq_cuda

    d = make_vptq(n, k, main, res, DEVICE, seed=n ^ k)
    x = torch.randn(1, k, device=DEVICE).to(dtype)
    assert vptq_cuda.supports(x, n, d["codebook"], d["index_bits"], d.get("res_codebook"), d.get("res_index_bits"),
                              d["scale"], d["bias"])
    outs = []
    for _ in range(2):  # the second call checks that the tile counters were left at zero
        out = torch.full((1, n), float("nan"), device=DEVICE, dtype=dtype)
        vptq_cuda.gemv(x, n, d["indices"], d["codebook"], d["index_bits"], d.get("res_indices"), d.get("res_codebook"),
                       d.get("res_index_bits"), d["scale"], d["bias"], out)
        outs.append(out)
    assert rel_err(outs[0], vptq_linear_ref(x, n, **d)) < (3e-3 if dtype == torch.float16 else 1.2e-2)
    assert torch.equal(outs[0], outs[1])  # deterministic: fixed-order reduction


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("gt,cpt,cluster", [(4, 1, 1), (4, 7, 1), (8, 3, 1), (8, 66, 1), (4, 40, 1), (8, 66, 2),
                                           (4, 7, 2), (8, 33, 4), (8, 5, 4)])
@pytest.mark.parametrize("norm", [True, False])
def test_vptq_cuda_plans(gt, cpt, cluster, norm):
    from kernels import vptq_cuda

    n, k = 4096, 2048
    d = make_vptq(n, k, 8192, 512, DEVICE, seed=gt * cpt, scale=norm, bias=norm)
    x = torch.randn(1, k, device=DEVICE).half()
    ref = vptq_linear_ref(x, n, **d)
    for _ in range(2):
        out = torch.full((1, n), float("nan"), device=DEVICE, dtype=x.dtype)
        vptq_cuda.gemv(x, n, d["indices"], d["codebook"], 13, d["res_indices"], d["res_codebook"], 9, d.get("scale"),
                       d.get("bias"), out, gt=gt, cpt=cpt, cluster=cluster)
        assert rel_err(out, ref) < 3e-3


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", ["w16", "w8", "w8r", "w16b"])
@pytest.mark.parametrize("n,k,main,res", [(1032, 333, 4096, 256), (14336, 1024, 8192, 512), (2048, 4096, 4096, 0)])
def test_vptq_cuda_variants(name, n, k, main, res):
    from kernels import vptq_cuda

    d = make_vptq(n, k, main, res, DEVICE, seed=7)
    x = torch.randn(1, k, device=DEVICE).half()
    out = torch.full((1, n), float("nan"), device=DEVICE, dtype=x.dtype)
    vptq_cuda.gemv(x, n, d["indices"], d["codebook"], d["index_bits"], d.get("res_indices"), d.get("res_codebook"),
                   d.get("res_index_bits"), d["scale"], d["bias"], out, name=name)
    assert rel_err(out, vptq_linear_ref(x, n, **d)) < 3e-3


def test_vptq_cuda_plan_covers_the_chip():
    from kernels.vptq_cuda import plan

    for k, n in [(1024, 1024), (4096, 4096), (16384, 14336), (16384, 53248), (8192, 1032)]:
        gt, cpt = plan(n, k, 132)
        tiles = -(-(n // 8) // (32 * gt))
        assert gt in (4, 8) and 1 <= cpt and tiles * cpt <= 132
    assert plan(53248, 16384, 132) == (8, 5)  # 26 tiles x 5 = 130 CTAs: one wave, no tail to speak of


@pytest.mark.gpu
@needs_cuda
def test_vptq_linear_cuda_graph_replay():
    n, k = 14336, 4096
    d = make_vptq(n, k, 8192, 512, DEVICE, seed=5)
    x = torch.randn(1, k, device=DEVICE).half()
    vptq_linear(x, n, **d)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = vptq_linear(x, n, **d)
    for _ in range(3):
        x.copy_(torch.randn(1, k, device=DEVICE).half())
        g.replay()
        assert rel_err(y, vptq_linear_ref(x, n, **d)) < 3e-3
