"""The CUDA W8A16 2:4 GEMV on the sparse tensor cores (kernels/sp24_w16_gemv.py, kernels/csrc/sp24_w16_gemv.cu).

CPU: the metadata repack round trip, an emulation of what every lane of the kernel loads and what mma.sp m16n8k32
computes from it (the layouts the GPU probe measures) against the dense product, the split-K plan, the sm_90a build,
the launcher's errors, and the runtime offering the path only where it can run. GPU: the probe, layer shapes and token
counts against the reference, splits, variants and launch modes, CUDA-graph replays and the runtime's path."""

import pytest
import torch

from compress.errors import CompressError
from compress.packing.sparse24 import unpack_sparse24
from kernels import sp24_w16_gemv as spw
from kernels.cases import make_sparse24

CUDA = torch.cuda.is_available()


def gpu(test):
    """`-m gpu` selects it; a CPU run skips it."""
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")(test))


def random_24_int8(n, k, seed=0):
    return make_sparse24(n, k, torch.int8, "cpu", seed=seed)


# ------------------------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("n,k", [(16, 128), (40, 256), (33, 384), (1, 128)])
def test_meta_fragments_round_trip(n, k):
    p = random_24_int8(n, k, seed=n + k)
    frag = spw.pack_meta_fragments(p["meta"], n, k)
    assert frag.shape == (-(-n // 16), k // 128, 32, 2) and frag.dtype == torch.int32
    assert torch.equal(spw.unpack_meta_fragments(frag, n, k), p["meta"])
    # Same bytes as the row-major meta, up to the padding rows of the last 16-row tile.
    assert frag.numel() * 4 == -(-n // 16) * 16 * k // 8


def test_every_row_and_chunk_group_is_held_once_per_k_step():
    """Per k-step, the lanes that serve its selector cover the 16 rows x 8 mma groups once, and over the 4 k-steps
    the mma groups map onto the chunk's 32 groups once each."""
    layout = spw.meta_layout()
    for sel in range(2):
        lanes = [lane for lane in range(32) if lane % 4 // 2 == sel]
        cells = [tuple(map(int, layout[lane, j])) for lane in lanes for j in range(8)]
        assert sorted(cells) == [(r, g) for r in range(16) for g in range(8)]
    groups = sorted(spw.chunk_group(L, s) for s in range(4) for L in range(8))
    assert groups == list(range(32))


def test_padding_rows_get_a_valid_pattern():
    """mma.sp::ordered_metadata needs two distinct ascending positions per group: the rows past N hold (0, 1)."""
    p = random_24_int8(20, 128, seed=1)
    frag = spw.pack_meta_fragments(p["meta"], 20, 128)
    nibbles = ((frag.to(torch.int64) & 0xFFFFFFFF).unsqueeze(-1) >> (4 * torch.arange(8))) & 0xF
    assert not torch.isin(nibbles, torch.tensor([0b0000, 0b0101, 0b1010, 0b1111])).any()


def emulate(x: torch.Tensor, values: torch.Tensor, frag: torch.Tensor, n: int, k: int,
            layout: torch.Tensor | None = None) -> torch.Tensor:
    """y (M, N) float64 = what the kernel computes before the channel scale, lane by lane: the value word s each lane
    reads of rows g and g + 8 (bytes 16 t + 4 s.. of a chunk) as a0 a2 / a1 a3, its metadata register for k-step s
    (register s % 2, read under selector s // 2 only from lanes t // 2 == s // 2), its staged activations (b_j = the
    pair at positions 2 (t % 2).. of chunk group chunk_group(2 j + t // 2, s), token g or token 0 past M), and
    mma.sp's definition: kept column c of row m multiplies B at k = 4 (c / 2) + (the position its metadata nibble
    gives), with the A / B register layouts of the PTX ISA (the probe measures A and the metadata)."""
    m_tok = x.shape[0]
    r16, kc = frag.shape[0], frag.shape[1]
    vals = torch.zeros(r16 * 16, k // 2, dtype=torch.float64)
    vals[:n] = values.double()
    xd = x.double()
    layout = spw.meta_layout() if layout is None else layout
    y = torch.zeros(m_tok, r16 * 16, dtype=torch.float64)
    for r in range(r16):
        for c in range(kc):
            for s in range(4):
                a = torch.zeros(16, 16, dtype=torch.float64)
                b = torch.zeros(32, 8, dtype=torch.float64)
                nib = {}
                for lane in range(32):
                    g, t = divmod(lane, 4)
                    at = c * 64 + 16 * t + 4 * s
                    for row, word in ((g, vals[16 * r + g, at:at + 4]), (g + 8, vals[16 * r + g + 8, at:at + 4])):
                        a[row, 2 * t], a[row, 2 * t + 1], a[row, 2 * t + 8], a[row, 2 * t + 9] = word
                    if t // 2 == s // 2:
                        e = int(frag[r, c, lane, s % 2]) & 0xFFFFFFFF
                        for j in range(8):
                            nib[tuple(map(int, layout[lane, j]))] = (e >> (4 * j)) & 0xF
                    tok = g if g < m_tok else 0
                    for j in range(4):
                        grp = spw.chunk_group(2 * j + t // 2, s)
                        for h in range(2):
                            b[8 * j + 2 * t + h, g] = xd[tok, c * 128 + 4 * grp + 2 * (t % 2) + h]
                d = torch.zeros(16, 8, dtype=torch.float64)
                for row in range(16):
                    for grp in range(8):
                        v = nib[(row, grp)]
                        d[row] += a[row, 2 * grp] * b[4 * grp + (v & 3)] + a[row, 2 * grp + 1] * b[4 * grp + (v >> 2)]
                y[:, 16 * r:16 * r + 16] += d[:, :m_tok].t()
    return y[:, :n]


@pytest.mark.parametrize("m,n,k", [(3, 32, 256), (1, 20, 128), (8, 16, 128)])
def test_emulated_lanes_compute_the_dense_product(m, n, k):
    p = random_24_int8(n, k, seed=m + n)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(7)).half()
    frag = spw.pack_meta_fragments(p["meta"], n, k)
    want = x.double() @ unpack_sparse24(p["values"], p["meta"], (n, k)).double().t()
    assert torch.allclose(emulate(x, p["values"], frag, n, k), want, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("break_it", ["rows", "groups"])
def test_emulation_notices_a_wrong_metadata_layout(break_it):
    """The emulation is not vacuous: metadata packed for another register layout gives wrong sums."""
    n, k = 16, 128
    p = random_24_int8(n, k, seed=3)
    x = torch.randn(2, k, generator=torch.Generator().manual_seed(1)).half()
    wrong = spw.meta_layout().clone()
    if break_it == "rows":
        wrong[:, :, 0] = (wrong[:, :, 0] + 8) % 16  # rows g and g + 8 swapped
    else:
        wrong[:, :, 1] = wrong[:, :, 1] ^ 4  # mma groups t and t + 4 swapped
    frag = spw.pack_meta_fragments(p["meta"], n, k, layout=wrong)
    want = x.double() @ unpack_sparse24(p["values"], p["meta"], (n, k)).double().t()
    assert not torch.allclose(emulate(x, p["values"], frag, n, k), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n,k,m", [(4096, 4096, 1), (1024, 4096, 1), (14336, 4096, 8), (4096, 14336, 2),
                                   (1024, 8192, 4), (8192, 28672, 1), (28672, 8192, 1), (40, 256, 3), (8192, 28672, 8)])
def test_plan_covers_k_and_fits_shared_memory(n, k, m):
    kc = k // spw.CHUNK_K
    for name in spw.VARIANTS:
        for occ in (1, 4, 8):
            per, split = spw.plan(n, k, m, 132, name, ctas_per_sm=occ)
            assert per * split >= kc and per * (split - 1) < kc
            assert per * 256 * m <= spw.STAGED_BYTES


@pytest.mark.skipif(spw.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("sp24_w16_gemv")
def test_source_compiles_for_the_h100(sm90_library):
    """Every variant builds for sm_90a with this machine's nvcc (no GPU needed), and the plan's shared-memory budget
    is the kernel's own layout."""
    import ctypes

    assert len(sm90_library) == len(spw.VARIANTS)
    for path, (name, (warps, kw, depth)) in zip(sm90_library, spw.VARIANTS.items()):
        lib = ctypes.CDLL(str(path))
        spw._bind(lib)
        assert lib.sp24_w16_variant() == warps * 100 + kw * 10 + depth
        assert lib.sp24_w16_rows_per_cta() == spw.rows_per_cta(name) == 16 * warps // kw
        for per, m in [(1, 1), (13, 3), (64, 1), (32, 8)]:
            assert lib.sp24_w16_smem_bytes(per, m) == per * 256 * m


def test_launcher_errors_name_the_problem():
    v, s = torch.zeros(64, 128, dtype=torch.int8), torch.ones(64)
    frag = spw.pack_meta_fragments(torch.full((64, 8), 0x44444444, dtype=torch.int32), 64, 256)
    with pytest.raises(CompressError, match="M=9 tokens"):
        spw._check("sparse24_w8a16_gemv", torch.zeros(9, 256).half(), v, s, frag)
    with pytest.raises(CompressError, match="multiple of 128"):
        spw._check("sparse24_w8a16_gemv", torch.zeros(1, 192).half(), torch.zeros(64, 96, dtype=torch.int8), s, frag)
    with pytest.raises(CompressError, match="float32"):
        spw._check("sparse24_w8a16_gemv", torch.zeros(1, 256).half(), v, s.half(), frag)
    with pytest.raises(CompressError, match="pack_meta_fragments"):
        spw._check("sparse24_w8a16_gemv", torch.zeros(1, 256).half(), v, s, None)
    with pytest.raises(CompressError, match="needs CUDA tensors"):
        spw._check("sparse24_w8a16_gemv", torch.zeros(1, 256).half(), v, s, frag)
    assert not spw.supports(torch.zeros(1, 256).half(), v, s, frag)  # CPU: never offered


def test_an_unknown_variant_is_an_error():
    with pytest.raises(CompressError, match="variant 'w9d9' is not one of"):
        spw.sparse24_w8a16_gemv(torch.zeros(1, 256).half(), torch.zeros(64, 128, dtype=torch.int8), None, torch.ones(64),
                                variant="w9d9")


@pytest.mark.parametrize("name,value,says", [("COMPRESS_SP24_W16_PDL", "3", "unset it or pick one"),
                                             ("COMPRESS_SP24_W16_VARIANTS", "w8d2,w9", r"unknown ones \['w9'\]")])
def test_a_malformed_setting_is_an_error_not_a_silently_dropped_path(monkeypatch, name, value, says):
    monkeypatch.setenv(name, value)
    with pytest.raises(CompressError, match=f"{name}={value!r}.*{says}"):
        spw.supports(torch.zeros(1, 256).half(), torch.zeros(64, 128, dtype=torch.int8), torch.ones(64), None)


def test_the_offered_builds_can_be_chosen(monkeypatch):
    assert spw.runtime_variants() == spw.RUNTIME_VARIANTS
    monkeypatch.setenv("COMPRESS_SP24_W16_VARIANTS", "w8k8d2, w4k4d2")
    assert spw.runtime_variants() == ("w8k8d2", "w4k4d2")


def w8a16_24_layer(n, k, values, meta, w_scale, **kw):
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.spec import LayerSpec

    spec = LayerSpec(name="l", format="compress.sparse24", in_features=k, out_features=n,
                     args={"version": 1, "base_format": "compressed-tensors.w8a16"})
    return Sparse24Linear(spec, torch.float16, values, meta, w_scale, **kw)


def test_runtime_offers_no_cuda_w8a16_2_4_path_on_cpu():
    p = random_24_int8(64, 256)
    sp = w8a16_24_layer(64, 256, p["values"], p["meta"], torch.ones(64))
    assert sp.w8a16
    names = [name for name, _ in sp.kernel_paths(torch.zeros(1, 256).half())]
    assert names[0] == "kernel" and not any(name.startswith("cuda_sp24_w16") for name in names)


# ------------------------------------------------------------------------------------------------ GPU
TOL = 2e-3
SHAPES = [(40, 256), (33, 384), (100, 128), (257, 640), (4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]


def rel_err(a, b):
    assert torch.isfinite(a.float()).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@gpu
def test_probe_measures_the_layouts_this_module_packs_for():
    got = spw.probe_layout("cuda")
    assert got["a_ok"], f"A layout differs: {sorted(got['a'].items())}"
    assert got["meta_ok"], f"metadata layout differs: {sorted((k, v) for k, v in got['meta'].items() if v is not None)}"


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_matches_reference(dtype, n, k):
    """Against kernels.sparse24's reference (fp32 sums of the exact products) for 1..8 tokens."""
    from kernels.sparse24 import sparse24_w8a16_linear_ref

    q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 5 + k)
    frag = spw.pack_meta_fragments(q["meta"], n, k)
    for m in range(1, 9):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        out = spw.sparse24_w8a16_gemv(x, q["values"], frag, q["w_scale"])
        assert out.shape == (m, n) and out.dtype == dtype
        assert rel_err(out, sparse24_w8a16_linear_ref(x, q["values"], q["meta"], q["w_scale"])) < TOL, f"M={m}"


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_every_variant_and_launch_mode_gives_the_same_bytes_for_a_split(dtype):
    """A split (per, S) and the warps a tile (which chunks each warp adds) fix the order of every sum: any variant
    with those (depth, tiles a CTA) and launch mode gives the same bytes; another split agrees to rounding. Odd N (a
    part-filled last tile), a row stride past K."""
    from kernels.sparse24 import sparse24_w8a16_linear_ref

    n, k = 1000, 2048
    q = make_sparse24(n, k, torch.int8, "cuda", seed=9)
    frag = spw.pack_meta_fragments(q["meta"], n, k)
    kc = k // spw.CHUNK_K
    for m in (1, 5, 8):
        xx = torch.randn(m, k + 64, device="cuda").to(dtype)
        x = xx[:, :k]  # rows k + 64 apart
        ref = sparse24_w8a16_linear_ref(x, q["values"], q["meta"], q["w_scale"])
        for split in ((kc, 1), (1, kc), (3, -(-kc // 3))):
            for kw in sorted({v[1] for v in spw.VARIANTS.values()}):
                outs = [spw.launch(x, q["values"], frag, q["w_scale"], name=name, pdl=pdl, split=split)
                        for name in sorted(spw.VARIANTS) if spw.VARIANTS[name][1] == kw for pdl in (0, 1, 2)]
                assert all(torch.equal(o, outs[0]) for o in outs[1:]), f"M={m} split={split} warps a tile {kw}"
                assert rel_err(outs[0], ref) < TOL


@gpu
def test_graph_replays_give_the_same_bytes():
    """The split-K counters are zero again after every launch: CUDA-graph replays repeat the output."""
    n, k = 4096, 14336
    q = make_sparse24(n, k, torch.int8, "cuda", seed=4)
    frag = spw.pack_meta_fragments(q["meta"], n, k)
    x = torch.randn(1, k, device="cuda").half()
    want = spw.sparse24_w8a16_gemv(x, q["values"], frag, q["w_scale"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = spw.sparse24_w8a16_gemv(x, q["values"], frag, q["w_scale"])
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got, want)


@gpu
def test_runtime_w8a16_2_4_layer_offers_and_agrees_with_the_cuda_path():
    """Up to 8 tokens the W8A16 2:4 layer offers this GEMV (metadata repacked once, again after the layer's meta
    changes), and it computes the reference's math."""
    n, k = 512, 1024
    q = make_sparse24(n, k, torch.int8, "cuda", seed=2)
    sp = w8a16_24_layer(n, k, q["values"], q["meta"], q["w_scale"])
    names = [f"cuda_sp24_w16_{var}" for var in spw.runtime_variants()]
    for m in (1, 4, 8, 9):
        x = torch.randn(m, k, device="cuda").half()
        paths = dict(sp.kernel_paths(x))
        assert all((name in paths) == (m <= 8) for name in names), f"M={m}: {sorted(paths)}"
        for name in names if m <= 8 else ():
            assert rel_err(paths[name](), sp.reference(x)) < TOL
    first = sp._meta_fragments_w16()
    sp.meta = sp.meta.clone()  # a new meta tensor (as fusing gives): repacked, same registers
    again = sp._meta_fragments_w16()
    assert again is not first and torch.equal(again, first)


@gpu
def test_custom_op_schema_and_fake_tensor():
    """compress::sp24_w16_gemv is a registered custom op with a fake (meta) function: torch.compile traces it."""
    n, k = 256, 512
    q = make_sparse24(n, k, torch.int8, "cuda", seed=6)
    frag = spw.pack_meta_fragments(q["meta"], n, k)
    x = torch.randn(3, k, device="cuda").half()
    torch.library.opcheck(torch.ops.compress.sp24_w16_gemv, (x, q["values"], frag, q["w_scale"], spw.DEFAULT_VARIANT),
                          test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda x: spw.sparse24_w8a16_gemv(x, q["values"], frag, q["w_scale"]), fullgraph=True)
    assert torch.equal(compiled(x), spw.sparse24_w8a16_gemv(x, q["values"], frag, q["w_scale"]))
