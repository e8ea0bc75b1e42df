"""Session 14: `kernels.sparse24.densify_sparse24`, the one-launch dense weight behind the runtime's "dequantize, then
the dense GEMM" paths for 2:4 layers: the same bits as compress.packing.sparse24.unpack_sparse24 (kept -0.0 included),
one-line errors, and the runtime layer using it where the kernels run."""

import pytest
import torch

from compress.errors import CompressError
from compress.packing.sparse24 import pack_sparse24, unpack_sparse24
from kernels.cases import LLAMA_SHAPES, make_sparse24
from kernels.sparse24 import densify_sparse24

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.int8: torch.uint8}


def random_24(n, k, dtype, seed=0):
    """A 2:4 weight with every position pattern, signed zeros among the kept values."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.int8:
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    else:
        w = (torch.randn(n, k, generator=g) * 5).to(dtype)
    groups = w.reshape(n, k // 4, 4).clone()
    groups.scatter_(-1, torch.rand(n, k // 4, 4, generator=g).argsort(-1)[..., :2], 0)
    w = groups.reshape(n, k)
    if dtype != torch.int8:
        w[0, :4] = torch.tensor([-0.0, 0.0, 3.0, 0.0]).to(dtype)  # pack keeps the -0.0 (it has room)
    return pack_sparse24(w.to(DEVICE))


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("shape", [(40, 36), (33, 96), (64, 1040), (5, 8), (17, 12), (3, 2056), (1, 4), (20, 4104)])
def test_densify_gives_unpack_bits(shape, dtype):
    # odd rows, a meta word covering part of a row, K of one group, int8 K not a multiple of 8 (torch's unpack)
    n, k = shape
    p = random_24(n, k, dtype, seed=n + k)
    got = densify_sparse24(p["values"], p["meta"], k)
    assert same_bits(got, unpack_sparse24(p["values"], p["meta"], (n, k)))


def test_densify_names_what_does_not_match():
    p = random_24(8, 64, torch.float16)
    with pytest.raises(CompressError, match=r"densify_sparse24: values \(8, 32\).*\(8, 128\) weight; expected \(8, 64\)"):
        densify_sparse24(p["values"], p["meta"], 128)
    with pytest.raises(CompressError, match="int32"):
        densify_sparse24(p["values"], p["meta"].to(torch.int64), 64)


def test_runtime_dense_weight_is_the_kernels_where_they_run():
    from compress.runtime import kernel_bridge as kb
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.spec import LayerSpec

    n, k = 48, 96
    p = random_24(n, k, torch.int8, seed=5)
    spec = LayerSpec(name="l", format="compress.sparse24", in_features=k, out_features=n)
    layer = Sparse24Linear(spec, torch.float16, p["values"], p["meta"], torch.ones(n, device=DEVICE))
    want = unpack_sparse24(p["values"], p["meta"], (n, k))
    with kb.allow_interpreter():
        assert kb.unavailable(torch.device(DEVICE), "sparse24", "densify_sparse24") is None
        assert same_bits(layer._dense(), want)
    assert same_bits(layer._dense(), want)  # on a CPU without the interpreter allowed: torch's unpack


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize("shape", LLAMA_SHAPES, ids=[s[0] for s in LLAMA_SHAPES])
def test_densify_llama_shapes_gpu(shape, dtype):
    _, n, k = shape
    p = make_sparse24(n, k, dtype, "cuda", seed=1)
    want = unpack_sparse24(p["values"], p["meta"], (n, k))
    assert same_bits(densify_sparse24(p["values"], p["meta"], k), want)
