"""The int8 CUDA GEMV built with warps sharing one row tile (kernels/i8_gemv.py SHARED_TILE, -DI8_KS; session 26):
dense W8A8 and 2:4 int8, one K chunk and split K, for 1..64 tokens, bit for bit against the reference epilogue on the
kernel's own quantized activations; the same bytes in CUDA-graph replays; the runtime's dense W8A8 path, its config
table and its setting on the CPU."""

import pytest
import torch

from compress.errors import CompressError
from compress.packing.sparse24 import unpack_sparse24
from kernels import i8_gemv
from kernels.cases import make_sparse24, make_w8a8

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")
SHARED = sorted(i8_gemv.SHARED_TILE)


def layer(n, k, sparse, seed):
    """(weights as stored, dense int8 weights, w_scale, metadata fragments or None) on the GPU."""
    if sparse:
        q = make_sparse24(n, k, torch.int8, "cuda", seed=seed)
        return q["values"], unpack_sparse24(q["values"], q["meta"], (n, k)), q["w_scale"], \
            i8_gemv.pack_meta_fragments(q["meta"], n, k)
    w, sw = make_w8a8(n, k, "cuda", seed=seed)
    return w, w, sw, None


# ----------------------------------------------------------------------------------------------------- GPU
@gpu
@pytest.mark.parametrize("name", SHARED)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "2:4"])
@pytest.mark.parametrize("n,k", [(1000, 2112), (33, 640), (4096, 14336)])
def test_shared_tile_builds_are_exact_on_every_epilogue(name, sparse, n, k):
    """Odd N (a partial tile), K with an odd number of blocks (some warps of a tile get one slot fewer, or none), a
    real 8B shape; one K chunk (the holder stores y), split K through the workspace, and the plan's split."""
    from kernels.w8a8 import quantize_per_token

    bk = i8_gemv.block_k(sparse)
    if k % bk:
        pytest.skip(f"2:4 blocks are {bk} k")
    w, dense, sw, frag = layer(n, k, sparse, seed=n + k)
    kb = k // bk
    for m in (1, 5, 9, 16, 17, 40, 64):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).half()
        xq, sx = quantize_per_token(x, recip=True)
        acc = (xq.double() @ dense.double().t()).float()
        want = (acc * sx[:, None] * sw.float()[None, :]).half()
        splits = [sp for sp in ((kb, 1), (3, -(-kb // 3)), (1, kb)) if i8_gemv.smem_bytes(sp[0], m, name, sparse)
                  <= i8_gemv.SMEM_BYTES] + [None]
        for split in splits:
            got = i8_gemv.launch_quantized(xq, sx, w, sw, torch.float16, frag, name=name, split=split)
            assert torch.equal(got, want), f"M={m} split={split}: {(got.float() - want.float()).abs().max().item()}"


@gpu
@pytest.mark.parametrize("name", SHARED)
def test_shared_tile_graph_replays_give_the_same_bytes(name):
    """The split-K workspace and counters are zero again after every launch of a shared-tile build."""
    n, k = 4096, 14336
    w, sw = make_w8a8(n, k, "cuda", seed=3)
    x = torch.randn(12, k, device="cuda").half()
    want = i8_gemv._launch(x, w, sw, None, name=name, pdl=2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = i8_gemv._launch(x, w, sw, None, name=name, pdl=2)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got, want)


@gpu
def test_runtime_dense_layer_offers_the_tuned_build_and_agrees(monkeypatch):
    """Where DENSE_TUNED names a build, the W8A8 layer offers "cuda_i8" up to 16 tokens, and it is the kernel's math."""
    from compress.runtime.formats_ct import CTW8A8Linear
    from compress.runtime.spec import LayerSpec
    from kernels.w8a8 import quantize_per_token

    n, k = 512, 1024
    monkeypatch.setitem(i8_gemv.DENSE_TUNED, (n, k), {4: (SHARED[0], 0.5), 16: (SHARED[-1], 1.0)})
    w, sw = make_w8a8(n, k, "cuda", seed=2)
    lin = CTW8A8Linear(LayerSpec(name="l", format="compressed-tensors.w8a8", in_features=k, out_features=n),
                       torch.float16, w, sw)
    for m in (1, 3, 16, 17):
        x = torch.randn(m, k, device="cuda").half()
        paths = dict(lin.kernel_paths(x))
        assert ("cuda_i8" in paths) == (m <= 16), f"M={m}: {sorted(paths)}"
        if "cuda_i8" in paths:
            xq, sx = quantize_per_token(x, recip=True)
            want = ((xq.double() @ w.double().t()).float() * sx[:, None] * sw.float()[None, :]).half()
            assert torch.equal(paths["cuda_i8"](), want), f"M={m}"


# ----------------------------------------------------------------------------------------------------- CPU
def test_shared_tile_rows_and_plans():
    """A CTA of a shared-tile build owns warps / KS row tiles; the plan covers K once, fits shared memory and leaves
    each warp's ring room for its sums at 64 tokens (the .cu's static_assert)."""
    for name, ks in i8_gemv.SHARED_TILE.items():
        warps, blocks, slots = i8_gemv.VARIANTS[name]
        assert warps % ks == 0 and i8_gemv.rows_per_cta(name) == 16 * warps // ks
        assert slots * 16 * blocks * 64 >= 8 * 4 * 32 * 4
        for sparse in (False, True):
            for n, k, m in [(4096, 14336, 1), (28672, 8192, 16), (1024, 4096, 64), (33, 640, 3)]:
                per, split = i8_gemv.plan(n, k, m, 132, name, sparse, 1.0, 2)
                kb = k // i8_gemv.block_k(sparse)
                assert per * split >= kb and per * (split - 1) < kb
                assert i8_gemv.smem_bytes(per, m, name, sparse) <= i8_gemv.SMEM_BYTES


def test_dense_config_buckets_and_setting(monkeypatch):
    monkeypatch.delenv("COMPRESS_I8_DENSE", raising=False)
    monkeypatch.delenv("COMPRESS_I8_DENSE_PICKS", raising=False)
    monkeypatch.setitem(i8_gemv.DENSE_TUNED, (4096, 14336), {4: ("w16b2s2k4", 0.5), 16: ("w8b2s3k4", 1.0)})
    assert i8_gemv.dense_config(1, 4096, 14336) == ("w16b2s2k4", 0.5)
    assert i8_gemv.dense_config(5, 4096, 14336) == ("w8b2s3k4", 1.0)
    assert i8_gemv.dense_config(17, 4096, 14336) is None and i8_gemv.dense_config(2, 4096, 4096) is None
    monkeypatch.setenv("COMPRESS_I8_DENSE", "w16b2s2k8/2")
    assert i8_gemv.dense_config(40, 1, 1) == ("w16b2s2k8", 2.0)
    monkeypatch.setenv("COMPRESS_I8_DENSE", "w99")
    with pytest.raises(CompressError, match="unknown variant 'w99'"):
        i8_gemv.dense_config(1, 1, 1)
    monkeypatch.setenv("COMPRESS_I8_DENSE", "w16b2s2k8/fast")
    with pytest.raises(CompressError, match="'fast' is not a number"):
        i8_gemv.dense_config(1, 1, 1)


def test_picks_file_replaces_the_table(monkeypatch, tmp_path):
    monkeypatch.delenv("COMPRESS_I8_DENSE", raising=False)
    f = tmp_path / "picks.json"
    f.write_text('{"4096,14336": {"8": ["w16b2s2k4", 0.5]}}')
    monkeypatch.setenv("COMPRESS_I8_DENSE_PICKS", str(f))
    assert i8_gemv.dense_config(3, 4096, 14336) == ("w16b2s2k4", 0.5)
    assert i8_gemv.dense_config(9, 4096, 14336) is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"4096,14336": {"8": ["nope", 0.5]}}')
    monkeypatch.setenv("COMPRESS_I8_DENSE_PICKS", str(bad))
    with pytest.raises(CompressError, match="unknown variants \\['nope'\\]"):
        i8_gemv.dense_config(3, 4096, 14336)
    monkeypatch.setenv("COMPRESS_I8_DENSE_PICKS", str(tmp_path / "missing.json"))
    with pytest.raises(CompressError, match="not a readable picks file"):
        i8_gemv.dense_config(3, 4096, 14336)


def test_runtime_offers_no_cuda_dense_path_on_cpu(monkeypatch):
    from compress.runtime.formats_ct import CTW8A8Linear
    from compress.runtime.spec import LayerSpec

    monkeypatch.setitem(i8_gemv.DENSE_TUNED, (64, 256), {16: (SHARED[0], 1.0)})
    lin = CTW8A8Linear(LayerSpec(name="l", format="compressed-tensors.w8a8", in_features=256, out_features=64),
                       torch.float16, torch.zeros(64, 256, dtype=torch.int8), torch.ones(64))
    assert "cuda_i8" not in [name for name, _ in lin.kernel_paths(torch.zeros(4, 256).half())]
