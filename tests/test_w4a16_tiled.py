"""The row-tiled qweight order (compress/packing/int4_tiled.py) and the W4A16 CUDA GEMV builds that read it
(kernels/w4a16_cuda.py TILED, -DW4_TILED=1; session 27): on the CPU the permutation, its inverse and the address
the kernel computes for every 16-byte copy, and the sm_90a build; on the GPU, every tiled build gives the same bytes
as its plain build on the plain weights (only the copy source moved), for 1..64 tokens and every epilogue."""

import ctypes

import pytest
import torch

from compress.errors import CompressError
from compress.packing.int4 import pack_int4
from compress.packing.int4_tiled import tile_rows, untile_rows
from kernels import w4a16_cuda
from kernels.cases import make_int4

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")


# ----------------------------------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("n,k", [(16, 128), (48, 320), (1024, 4096)])
def test_tiling_round_trips_and_keeps_the_shape(n, k):
    u = torch.randint(0, 16, (n, k), generator=torch.Generator().manual_seed(n + k), dtype=torch.uint8)
    q = pack_int4(u)
    t = tile_rows(q)
    assert t.shape == q.shape and t.dtype == q.dtype and t.is_contiguous()
    assert torch.equal(untile_rows(t), q)
    assert sorted(t.flatten().tolist()) == sorted(q.flatten().tolist())
    if n > 16 and k > 128:
        assert not torch.equal(t, q)


def test_tiled_address_is_the_kernels():
    """The kernel reads the 16-byte piece p of row r's 128-k block b at uint4 offset ((r / 16) x kblocks + b) x 64 +
    (r % 16) x 4 + p of the tiled tensor (w4a16_gemv.cu, W4_TILED); the plain layout has it at r x kblocks x 4 +
    b x 4 + p. Every piece of a 48 x 384 layer checked."""
    n, k = 48, 384
    q = pack_int4(torch.randint(0, 16, (n, k), generator=torch.Generator().manual_seed(3), dtype=torch.uint8))
    kblocks = k // 128
    plain = q.reshape(-1, 4)  # one row of this view = one 16-byte piece
    tiled = tile_rows(q).reshape(-1, 4)
    for r in range(n):
        for b in range(kblocks):
            for p in range(4):
                assert torch.equal(tiled[((r // 16) * kblocks + b) * 64 + (r % 16) * 4 + p],
                                   plain[r * kblocks * 4 + b * 4 + p])


@pytest.mark.parametrize("shape,dtype", [((20, 16), torch.int32), ((32, 24), torch.int32), ((32, 16), torch.int64)])
def test_tiling_refuses_what_it_cannot_tile(shape, dtype):
    with pytest.raises(CompressError, match="int4 tiling"):
        tile_rows(torch.zeros(shape, dtype=dtype))


def test_tiled_builds_plan_like_their_plain_builds():
    for name, plain in w4a16_cuda.TILED.items():
        assert name not in w4a16_cuda.VARIANTS  # nothing serves them
        assert w4a16_cuda.rows_per_cta(name) == w4a16_cuda.rows_per_cta(plain)
        assert w4a16_cuda.smem_bytes(7, 3, name) == w4a16_cuda.smem_bytes(7, 3, plain)
        assert w4a16_cuda.plan(4096, 14336, 1, 132, name) == w4a16_cuda.plan(4096, 14336, 1, 132, plain)
        assert w4a16_cuda.plan_balanced(4096, 4096, 1, 132, name) is None


@pytest.mark.skipif(w4a16_cuda.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("w4a16_tiled")
def test_tiled_source_compiles_for_the_h100(sm90_library):
    lib = ctypes.CDLL(str(sm90_library))
    warps, blocks, slots = w4a16_cuda.VARIANTS["w16b2s2"]
    assert lib.w4a16_gemv_variant() == 1000000 + warps * 100 + blocks * 10 + slots


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("name", sorted(w4a16_cuda.TILED))
@pytest.mark.parametrize("dtype,gs,sym", [(torch.float16, 128, True), (torch.bfloat16, 64, False)],
                         ids=["fp16-g128-sym", "bf16-g64-asym"])
@pytest.mark.parametrize("n,k", [(272, 320), (1024, 2112), (4096, 14336)])
def test_tiled_builds_give_the_plain_builds_bytes(name, dtype, gs, sym, n, k):
    """K = 64 x odd (a half block), N = 17 tiles of 16 (a partial CTA), a real 8B shape; one K chunk, split K through
    the workspace and inside a cluster (the row-tile builds only where the plain build plans it)."""
    plain = w4a16_cuda.TILED[name]
    p = make_int4(n, k, gs, sym, dtype, "cuda", seed=n + k + gs)
    qt = tile_rows(p["qweight"])
    for m in (1, 5, 16, 17, 64):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        for waves, cluster in ((0.01, False), (1.0, False), (2.0, True)):
            kw = dict(waves=waves, cluster=cluster, min_blocks=64 if waves < 0.1 else None)
            want = w4a16_cuda._launch(x, p["qweight"], p["scales"], p["zeros"], gs, name=plain, **kw)
            got = w4a16_cuda._launch(x, qt, p["scales"], p["zeros"], gs, name=name, **kw)
            assert torch.equal(got, want), (m, waves, cluster)


@gpu
def test_tiled_build_refuses_a_partial_tile():
    p = make_int4(40, 256, 128, True, torch.float16, "cuda", seed=1)
    x = torch.randn(1, 256, device="cuda").half()
    with pytest.raises(CompressError, match="multiple of 16"):
        w4a16_cuda._launch(x, p["qweight"], p["scales"], None, 128, name="w16b2s2t")
