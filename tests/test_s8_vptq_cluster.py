"""The cluster split-K VPTQ GEMV (kernels/vptq_cluster.py): plan and build on the CPU, every launch shape
against the reference on the GPU."""

import ctypes

import pytest
import torch

from compress.errors import CompressError
from kernels import cuda_build, vptq_cluster, vptq_select
from kernels.cases import make_vptq
from kernels.vptq import vptq_linear, vptq_linear_ref
from tests.test_kernels_vptq import DEVICE, needs_cuda, rel_err

SEED_SHAPES = [(k, n) for k in (1024, 2048, 4096, 8192, 16384) for n in (1024, 4096, 8192, 14336, 28672, 53248)]


def test_candidates_fill_at_most_two_waves_and_plan_picks_one():
    for k, n in SEED_SHAPES + [(576, 1536), (1032, 333)]:
        cands = vptq_cluster.candidates(n, 132)
        assert cands, (k, n)
        for c in cands:
            assert 1 <= c.cl <= vptq_cluster.MAX_CLUSTER and (c.gt, c.lt) in vptq_cluster.TILES
            assert c.tiles(n) * c.cl <= 2 * 132
        assert vptq_cluster.plan(n, k, 132) in cands


def test_plan_splits_small_layers_over_many_ctas():
    # out_features 1024 has only 128 vectors per column: narrow tiles x a cluster split keep >= 64 SMs busy.
    launch = vptq_cluster.plan(1024, 1024, 132)
    assert launch.tiles(1024) * launch.cl >= 64
    big = vptq_cluster.plan(53248, 16384, 132)
    assert big.smem and big.tiles(53248) * big.cl <= 132  # one wave, codebooks in shared memory


def test_tile_count_covers_every_output():
    for gt, lt in vptq_cluster.TILES:
        launch = vptq_cluster.Launch(gt, lt, 1, True)
        for n in (8, 64, 1032, 4096, 53248):
            assert launch.tiles(n) * gt * lt * 8 >= n > (launch.tiles(n) - 1) * gt * lt * 8


def test_bad_kernel_choice_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("COMPRESS_VPTQ_KERNEL", "fastest")
    with pytest.raises(CompressError, match="COMPRESS_VPTQ_KERNEL='fastest'.*auto"):
        vptq_select.choice()


def test_declines_cpu_tensors():
    d = make_vptq(64, 16, 4096, 256, "cpu")
    assert not vptq_cluster.supports(torch.randn(1, 16).half(), d["codebook"], 12, d["res_codebook"], 8, d["scale"],
                                     d["bias"])


@pytest.mark.skipif(cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("vptq_cluster")
def test_source_compiles_for_the_h100(sm90_library):
    """Builds for sm_90a with this machine's nvcc (no GPU needed) and exports what the launcher binds."""
    lib = ctypes.CDLL(str(sm90_library))
    assert lib.vptq_cluster_bits() == 1309
    lib.vptq_cluster_smem_bytes.restype = ctypes.c_long
    # Shared memory: main codebook (2^13 x 16 B) + 8 residual copies (2^9 x 16 B each); L1 path: 40 KB.
    assert lib.vptq_cluster_smem_bytes(1, 8) == (16 << 13) + (8 * 16 << 9)
    assert lib.vptq_cluster_smem_bytes(0, 8) == 40 * 1024


def _call(x, n, d, launch):
    out = torch.full((1, n), float("nan"), device=x.device, dtype=x.dtype)
    return vptq_cluster.gemv(x, n, d["indices"], d["codebook"], d["index_bits"], d.get("res_indices"),
                             d.get("res_codebook"), d.get("res_index_bits"), d.get("scale"), d.get("bias"), out, launch)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("gt,lt", vptq_cluster.TILES)
@pytest.mark.parametrize("cl", [1, 3, 8, 16])
@pytest.mark.parametrize("smem", [True, False])
def test_every_launch_matches_reference(gt, lt, cl, smem):
    n, k = 1032, 1000  # partial last tile, K not a multiple of the split
    for main, res in ((4096, 256), (8192, 512), (4096, 0)):
        d = make_vptq(n, k, main, res, DEVICE, seed=gt * 100 + lt + cl)
        x = torch.randn(1, k, device=DEVICE).half()
        launch = vptq_cluster.Launch(gt, lt, cl, smem)
        y1, y2 = _call(x, n, d, launch), _call(x, n, d, launch)
        assert rel_err(y1, vptq_linear_ref(x, n, **d)) < 3e-3, (main, res)
        assert torch.equal(y1, y2)  # fixed-order reduction: same bytes every call


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("n,k,main,res,dtype,norm", [
    (1024, 1024, 4096, 256, torch.float16, True), (4096, 8192, 8192, 512, torch.float16, True),
    (14336, 4096, 4096, 512, torch.bfloat16, True), (53248, 1024, 8192, 256, torch.float16, False),
    (2056, 100, 8192, 0, torch.bfloat16, False), (8, 4096, 4096, 256, torch.float16, True)])
def test_planned_launch_matches_reference(n, k, main, res, dtype, norm):
    d = make_vptq(n, k, main, res, DEVICE, seed=n ^ k, scale=norm, bias=norm)
    x = torch.randn(1, k, device=DEVICE).to(dtype)
    assert vptq_cluster.supports(x, d["codebook"], d["index_bits"], d.get("res_codebook"), d.get("res_index_bits"),
                                 d.get("scale"), d.get("bias"))
    y = _call(x, n, d, None)
    assert rel_err(y, vptq_linear_ref(x, n, **d)) < (3e-3 if dtype == torch.float16 else 1.2e-2)


@pytest.mark.gpu
@needs_cuda
def test_kernel_choice_routes_vptq_linear(monkeypatch):
    n, k = 4096, 2048
    d = make_vptq(n, k, 4096, 256, DEVICE, seed=3)
    x = torch.randn(1, k, device=DEVICE).half()
    ref = vptq_linear_ref(x, n, **d)
    outs = {}
    for name in ("cluster", "splitk", "auto"):
        monkeypatch.setenv("COMPRESS_VPTQ_KERNEL", name)
        outs[name] = vptq_linear(x, n, **d)
        assert rel_err(outs[name], ref) < 3e-3
    assert not torch.equal(outs["cluster"], outs["splitk"])  # two kernels, two summation orders
    picked = [v for key, v in vptq_select.chosen().items() if key[2:4] == (n, k)]
    assert len(picked) == 1 and vptq_select.describe(n, k).startswith(("splitk", "cluster"))  # measured once, kept
    again = vptq_linear(x, n, **d)
    assert torch.equal(again, outs["auto"])


@pytest.mark.gpu
@needs_cuda
def test_auto_choice_inside_a_capture_falls_back_to_splitk():
    n, k = 1032, 2000  # a shape no other test measured
    d = make_vptq(n, k, 4096, 256, DEVICE, seed=11)
    x = torch.randn(1, k, device=DEVICE).half()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = vptq_linear(x, n, **d)
    g.replay()
    assert rel_err(y, vptq_linear_ref(x, n, **d)) < 3e-3
    assert vptq_select.describe(n, k) is None  # nothing timed inside the capture


@pytest.mark.gpu
@needs_cuda
def test_cluster_kernel_in_a_cuda_graph_chain():
    """Three layers chained in one graph, fresh input on each replay (multicast copies and cluster barriers
    leave nothing behind between launches)."""
    n = k = 2048
    ds = [make_vptq(n, k, 8192, 512, DEVICE, seed=s) for s in range(3)]
    x = torch.randn(1, k, device=DEVICE).half()

    def chain(h):
        for d in ds:
            h = vptq_linear(h, n, **d) / 8
        return h

    chain(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = chain(x)
    for _ in range(3):
        x.copy_(torch.randn(1, k, device=DEVICE).half())
        g.replay()
        h = x
        for d in ds:
            h = vptq_linear_ref(h, n, **d) / 8
        assert rel_err(y, h) < 1e-2


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("gt,cpt", [(8, 1), (8, 5), (8, 44), (4, 26), (4, 7)])  # grids of 3 x cpt / 5 x cpt CTAs
@pytest.mark.parametrize("name", ["w16", "w16b"])
@pytest.mark.parametrize("norm", [True, False])
def test_splitk_cooperative_tail_matches_reference(gt, cpt, name, norm):
    """Every CTA of a tile sums a slice of it (cooperative launch); the counters go back to zero, so a
    second call and a graph replay give the same bytes."""
    from kernels import vptq_cuda

    n, k = 4104, 2000  # a partial last tile
    d = make_vptq(n, k, 8192, 512, DEVICE, seed=gt * cpt, scale=norm, bias=norm)
    x = torch.randn(1, k, device=DEVICE).half()
    out = torch.full((1, n), float("nan"), device=DEVICE, dtype=x.dtype)

    def call():
        return vptq_cuda.gemv(x, n, d["indices"], d["codebook"], 13, d["res_indices"], d["res_codebook"], 9,
                              d.get("scale"), d.get("bias"), out, gt=gt, cpt=cpt, name=name, coop=True)

    y1 = call().clone()
    assert rel_err(y1, vptq_linear_ref(x, n, **d)) < 3e-3
    assert torch.equal(call(), y1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    out.fill_(float("nan"))
    g.replay()
    g.replay()
    assert torch.equal(out, y1)


@pytest.mark.gpu
@needs_cuda
def test_refused_cooperative_launch_is_an_error_and_leaves_no_trace():
    """A grid larger than the GPU can hold at once is refused with a clear error, and the next launch of the
    same library is not blamed for it (the runtime's last error is cleared)."""
    from kernels import vptq_cuda

    n, k = 4104, 2000
    d = make_vptq(n, k, 4096, 256, DEVICE, seed=1)
    x = torch.randn(1, k, device=DEVICE).half()
    out = torch.empty(1, n, device=DEVICE, dtype=x.dtype)
    args = (d["indices"], d["codebook"], 12, d["res_indices"], d["res_codebook"], 8, d["scale"], d["bias"], out)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with pytest.raises(CompressError, match="launch failed"):
        vptq_cuda.gemv(x, n, *args, gt=8, cpt=sms, coop=True)  # 3 tiles x sms CTAs
    vptq_cuda.gemv(x, n, *args, gt=8, cpt=5, coop=True)
    assert rel_err(out, vptq_linear_ref(x, n, **d)) < 3e-3


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("smem", [True, False])
def test_pdl_chain_gives_the_same_bytes_as_plain_launches(monkeypatch, smem):
    """Cluster launches back to back in one graph, each reading the previous one's output: with programmatic
    dependent launch (weights requested before the wait, x after it) the bytes equal plain launches'."""
    n = k = 1024
    ds = [make_vptq(n, k, 4096, 256, DEVICE, seed=20 + s) for s in range(4)]
    launch = vptq_cluster.Launch(1, 8, 4, smem)
    x = torch.randn(1, k, device=DEVICE).half()
    outs = [torch.empty(1, n, device=DEVICE, dtype=x.dtype) for _ in ds]

    def chain():
        h = x
        for d, o in zip(ds, outs):
            h = vptq_cluster.gemv(h, n, d["indices"], d["codebook"], 12, d["res_indices"], d["res_codebook"], 8,
                                  d["scale"], d["bias"], o, launch)
        return h

    results = {}
    for pdl in ("1", "0"):
        monkeypatch.setenv("COMPRESS_VPTQ_PDL", pdl)
        chain()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            chain()
        for o in outs:
            o.fill_(float("nan"))
        g.replay()
        g.replay()
        results[pdl] = outs[-1].clone()
    assert torch.equal(results["1"], results["0"])
    h = x
    for d in ds:
        h = vptq_linear_ref(h, n, **d)
    assert rel_err(results["1"], h) < 1e-2


def test_build_cache_key_covers_included_headers(tmp_path):
    """An edited local header must change the cache key of every source that includes it."""
    (tmp_path / "common.cuh").write_text("// v1\n")
    src = tmp_path / "k.cu"
    src.write_text('#include <stdint.h>\n#include "common.cuh"\nint f() { return 1; }\n')
    before = cuda_build.source_bytes(src)
    assert b"// v1" in before
    (tmp_path / "common.cuh").write_text("// v2\n")
    assert cuda_build.source_bytes(src) != before


def test_failed_build_is_remembered_and_raised_again():
    calls = []

    def broken():
        calls.append(1)
        raise CompressError("nvcc not found")

    libs = cuda_build.Libraries(lambda so: None)
    for _ in range(2):
        with pytest.raises(CompressError, match="nvcc not found"):
            libs.get("k", broken)
    assert calls == [1]  # one attempt, not one per call
