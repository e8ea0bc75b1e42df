"""Session 15: the 2:4 fp16 layer offers a second tiling of the tensor-core kernel to the runtime's path table at
33..64 tokens (kernels.sparse24.alternative_configs), and it computes the same math."""

import pytest
import torch

from compress.runtime.formats_compress import Sparse24Linear
from compress.runtime.spec import LayerSpec
from kernels.cases import make_sparse24
from kernels.sparse24 import TC_CONFIG, TC_MAX_M, alternative_configs, sparse24_linear_ref, sparse24_linear_tiled

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_alternative_tiles_rule():
    for m in (33, 48, TC_MAX_M):
        alt = alternative_configs(m)
        assert list(alt) == ["tc64x64"] and alt["tc64x64"]["BN"] == TC_CONFIG["BN"] == 64, m
        assert alt["tc64x64"]["num_warps"] == 4 and alt["tc64x64"]["BM"] == 64
    for m, int8 in ((1, False), (32, False), (TC_MAX_M + 1, False), (48, True)):
        assert alternative_configs(m, int8) == {}, (m, int8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_runtime_offers_the_alternative_tiles(dtype):
    n, k = 72, 256
    p = make_sparse24(n, k, dtype, DEVICE, seed=5)
    layer = Sparse24Linear(LayerSpec(name="s", format="compress.sparse24", in_features=k, out_features=n), dtype,
                           p["values"], p["meta"], None)
    for m in (32, 33, 64, 65):
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype).to(DEVICE)
        paths = dict(layer.kernel_paths(x))
        assert ("kernel_tc64x64" in paths) == (32 < m <= TC_MAX_M), (m, sorted(paths))
        if "kernel_tc64x64" in paths:
            got = paths["kernel_tc64x64"]()
            assert got.shape == (m, n) and got.dtype == dtype
            assert rel_err(got, sparse24_linear_ref(x, p["values"], p["meta"])) < (3e-3 if dtype == torch.float16 else 1.2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("shape", [(6144, 4096), (28672, 4096), (4096, 14336), (28672, 8192)], ids=str)
def test_alternative_tiles_llama_shapes_gpu(shape):
    n, k = shape
    p = make_sparse24(n, k, torch.float16, "cuda", seed=n + k)
    x = torch.randn(64, k, device="cuda").half()
    got = sparse24_linear_tiled(x, p["values"], p["meta"], alternative_configs(64)["tc64x64"])
    assert rel_err(got, sparse24_linear_ref(x, p["values"], p["meta"])) < 3e-3
