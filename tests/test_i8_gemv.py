"""The CUDA int8 tensor-core GEMV (kernels/i8_gemv.py, kernels/csrc/i8_gemv.cu): W8A8 and 2:4 int8 at 1..64 tokens.

CPU: the 2:4 metadata repack round trip, an emulation of what every lane of the kernel loads and what the sparse mma
computes from it (the layouts the GPU probe measures) against the dense integer product, the split-K plan, the sm_90a
build, the launcher's errors, and the runtime offering the path only where it can run. GPU: the probe, every layer
shape and token count against the references (bit for bit on the same quantized activations), split plans, launch
modes, CUDA-graph replays and the runtime's paths."""

import pytest
import torch

from compress.errors import CompressError
from compress.packing.sparse24 import pack_sparse24, unpack_sparse24
from kernels import i8_gemv
from kernels.cases import make_sparse24, make_w8a8, prune_24

CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")


def random_24_int8(n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = prune_24(torch.randn(n, k, generator=g))
    q = torch.clamp(torch.round(w / w.abs().amax() * 127), -127, 127).to(torch.int8)
    return pack_sparse24(q)


# ------------------------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("n,k", [(16, 128), (40, 256), (33, 384), (1, 128)])
def test_meta_fragments_round_trip(n, k):
    p = random_24_int8(n, k, seed=n + k)
    frag = i8_gemv.pack_meta_fragments(p["meta"], n, k)
    assert frag.shape == (-(-n // 16), k // 128, 32, 2) and frag.dtype == torch.int32
    assert torch.equal(i8_gemv.unpack_meta_fragments(frag, n, k), p["meta"])
    # Same bytes as the row-major meta, up to the padding rows of the last 16-row group.
    assert frag.numel() * 4 == -(-n // 16) * 16 * k // 8


def test_meta_layout_covers_every_row_and_group_once():
    layout = i8_gemv.meta_layout()
    cells = {(int(r), int(g)) for r, g in layout.reshape(-1, 2)}
    assert cells == {(r, g) for r in range(16) for g in range(16)}
    for lane in range(32):  # one row and 8 consecutive groups per lane (the H100's measured layout)
        rows = {int(r) for r in layout[lane, :, 0]}
        groups = [int(g) for g in layout[lane, :, 1]]
        assert len(rows) == 1 and groups == list(range(groups[0], groups[0] + 8))


def test_padding_rows_get_a_valid_pattern():
    """mma.sp treats positions (0, 0), (1, 1)... as undefined: the rows past N must hold a real pattern."""
    p = random_24_int8(20, 128, seed=1)
    frag = i8_gemv.pack_meta_fragments(p["meta"], 20, 128)
    words = frag.to(torch.int64) & 0xFFFFFFFF
    nibbles = (words.unsqueeze(-1) >> (4 * torch.arange(8))) & 0xF
    assert not torch.isin(nibbles, torch.tensor([0b0000, 0b0101, 0b1010, 0b1111])).any()


def emulate_sparse(xq: torch.Tensor, values: torch.Tensor, frag: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """y (M, N) int64 = what the kernel computes, lane by lane: the 16 value bytes each lane copies (rows g, g + 8 at
    byte 16 t of a block; fragment f = bytes 8 f..8 f + 7 as a0 a2 / a1 a3), its metadata register, its staged
    activations (b_q = the 4 activations of block group fragment_group(4 q + t, f)), and mma.sp's definition: the
    kept value in column c of row m multiplies B at k = 4 (c / 2) + (position from the metadata nibble that covers
    (m, c / 2) per meta_layout), the dense m16n8k32 A / B layouts for the registers (the probe measures both)."""
    m_tok = xq.shape[0]
    assert m_tok <= 8
    r16, kb = frag.shape[0], frag.shape[1]
    vals = torch.zeros(r16 * 16, k // 2, dtype=torch.int64)
    vals[:n] = values.to(torch.int64)
    x = xq.to(torch.int64)
    layout = i8_gemv.meta_layout()
    y = torch.zeros(m_tok, r16 * 16, dtype=torch.int64)
    for r in range(r16):
        for b in range(kb):
            for f in range(2):
                a = torch.zeros(16, 32, dtype=torch.int64)
                bmat = torch.zeros(64, 8, dtype=torch.int64)
                nib = {}
                for lane in range(32):
                    g, t = divmod(lane, 4)
                    lo = b * 64 + 16 * t + 8 * f
                    ra, rb = vals[16 * r + g, lo:lo + 8], vals[16 * r + g + 8, lo:lo + 8]
                    regs = [ra[0:4], rb[0:4], ra[4:8], rb[4:8]]
                    for byte in range(16):
                        row = g + 8 * ((byte // 4) % 2)
                        col = 4 * t + byte % 4 + 16 * (byte // 8)
                        a[row, col] = regs[byte // 4][byte % 4]
                    e = int(frag[r, b, lane, f]) & 0xFFFFFFFF
                    for j in range(8):
                        nib[tuple(map(int, layout[lane, j]))] = (e >> (4 * j)) & 0xF
                    if g < m_tok:
                        for q in range(4):
                            grp = i8_gemv.fragment_group(4 * q + t, f)
                            for i in range(4):
                                bmat[16 * q + 4 * t + i, g] = x[g, b * 128 + 4 * grp + i]
                d = torch.zeros(16, 8, dtype=torch.int64)
                for row in range(16):
                    for grp in range(16):
                        v = nib[(row, grp)]
                        d[row] += a[row, 2 * grp] * bmat[4 * grp + (v & 3)] + a[row, 2 * grp + 1] * bmat[4 * grp + (v >> 2)]
                y[:, 16 * r:16 * r + 16] += d[:, :m_tok].t()
    return y[:, :n]


@pytest.mark.parametrize("m,n,k", [(3, 32, 256), (1, 20, 128)])
def test_emulated_lanes_compute_the_dense_integer_product(m, n, k):
    p = random_24_int8(n, k, seed=m + n)
    xq = torch.randint(-127, 128, (m, k), generator=torch.Generator().manual_seed(7), dtype=torch.int64).to(torch.int8)
    frag = i8_gemv.pack_meta_fragments(p["meta"], n, k)
    dense = unpack_sparse24(p["values"], p["meta"], (n, k)).to(torch.int64)
    want = xq.to(torch.int64) @ dense.t()
    assert torch.equal(emulate_sparse(xq, p["values"], frag, n, k), want)


def test_emulation_notices_a_wrong_metadata_layout():
    """The emulation is not vacuous: packing the metadata for another register layout gives wrong sums."""
    n, k = 16, 128
    p = random_24_int8(n, k, seed=3)
    xq = torch.randint(-127, 128, (2, k), generator=torch.Generator().manual_seed(1), dtype=torch.int64).to(torch.int8)
    wrong = i8_gemv.meta_layout().clone()
    wrong[:, :, 0] = (wrong[:, :, 0] + 8) % 16  # rows g and g + 8 swapped
    frag = i8_gemv.pack_meta_fragments(p["meta"], n, k, layout=wrong)
    want = xq.to(torch.int64) @ unpack_sparse24(p["values"], p["meta"], (n, k)).to(torch.int64).t()
    assert not torch.equal(emulate_sparse(xq, p["values"], frag, n, k), want)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "2:4"])
@pytest.mark.parametrize("n,k,m", [(4096, 4096, 1), (1024, 4096, 16), (14336, 4096, 8), (4096, 14336, 2),
                                   (1024, 8192, 4), (8192, 28672, 16), (40, 256, 3), (4096, 14336, 33),
                                   (8192, 28672, 64), (1024, 4096, 64)])
def test_plan_covers_k_and_fits_shared_memory(sparse, n, k, m):
    for name in i8_gemv.VARIANTS:
        per, split = i8_gemv.plan(n, k, m, 132, name, sparse, ctas_per_sm=2)
        kb = k // i8_gemv.block_k(sparse)
        assert per * split >= kb and per * (split - 1) < kb
        assert i8_gemv.smem_bytes(per, m, name, sparse) <= i8_gemv.SMEM_BYTES


@pytest.mark.skipif(i8_gemv.cuda_build.nvcc() is None, reason="nvcc not installed")
@pytest.mark.sm90_build("i8_gemv")
def test_source_compiles_for_the_h100(sm90_library):
    """Every variant builds for sm_90a with this machine's nvcc (no GPU needed), and the plan's shared-memory budget
    is the kernel's own layout."""
    import ctypes

    assert len(sm90_library) == len(i8_gemv.VARIANTS)
    for path, (name, (warps, blocks, slots)) in zip(sm90_library, i8_gemv.VARIANTS.items()):
        lib = ctypes.CDLL(str(path))
        i8_gemv._bind(lib)
        assert lib.i8_gemv_variant() == warps * 100 + blocks * 10 + slots
        assert lib.i8_gemv_rows_per_cta() == 16 * warps
        for per, m, sparse in [(1, 1, 0), (13, 3, 1), (8, 16, 0), (64, 9, 1), (12, 64, 1), (5, 17, 0), (7, 40, 1)]:
            assert lib.i8_gemv_smem_bytes(per, m, sparse) == i8_gemv.smem_bytes(per, m, name, bool(sparse))


def test_launcher_errors_name_the_problem():
    w, s = torch.zeros(64, 256, dtype=torch.int8), torch.ones(64)
    with pytest.raises(CompressError, match="M=65 tokens"):
        i8_gemv._check("w8a8_gemv", torch.zeros(65, 256).half(), w, s, False, None)
    with pytest.raises(CompressError, match="multiple of 64"):
        i8_gemv._check("w8a8_gemv", torch.zeros(1, 96).half(), torch.zeros(64, 96, dtype=torch.int8), s, False, None)
    with pytest.raises(CompressError, match="float32"):
        i8_gemv._check("w8a8_gemv", torch.zeros(1, 256).half(), w, s.half(), False, None)
    with pytest.raises(CompressError, match="pack_meta_fragments"):
        i8_gemv._check("sparse24_w8a8_gemv", torch.zeros(1, 256).half(), torch.zeros(64, 128, dtype=torch.int8), s, True,
                       None)
    with pytest.raises(CompressError, match="needs CUDA tensors"):
        i8_gemv._check("w8a8_gemv", torch.zeros(1, 256).half(), w, s, False, None)
    assert not i8_gemv.supports(torch.zeros(1, 256).half(), w, s)  # CPU: never offered


@pytest.mark.parametrize("name,value", [("COMPRESS_I8_GEMV_PDL", "3"), ("COMPRESS_I8_GEMV_CHAIN", "yes")])
def test_a_malformed_setting_is_an_error_not_a_silently_dropped_path(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(CompressError, match=f"{name}={value!r}.*unset it or pick one"):
        i8_gemv.supports(torch.zeros(1, 256).half(), torch.zeros(64, 256, dtype=torch.int8), torch.ones(64))


def test_runtime_offers_no_cuda_int8_path_on_cpu():
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.spec import LayerSpec

    p = random_24_int8(64, 256)
    sp = Sparse24Linear(LayerSpec(name="l", format="compress.sparse24", in_features=256, out_features=64), torch.float16,
                        p["values"], p["meta"], torch.ones(64))
    names = [name for name, _ in sp.kernel_paths(torch.zeros(1, 256).half())]
    assert names[0] == "kernel" and "cuda_sp24" not in names


# ------------------------------------------------------------------------------------------------ GPU
TOL = 2e-3
SHAPES = [(40, 256), (33, 384), (100, 128), (257, 640), (4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]


def rel_err(a, b):
    assert torch.isfinite(a.float()).all()
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def gpu_layer(n, k, sparse, seed):
    """(weights, w_scale, metadata fragments or None): a random 2:4 int8 layer (values) or a dense W8A8 one, on the GPU."""
    if sparse:
        q = make_sparse24(n, k, torch.int8, "cuda", seed=seed)
        return q["values"], q["w_scale"], i8_gemv.pack_meta_fragments(q["meta"], n, k)
    return (*make_w8a8(n, k, "cuda", seed=seed), None)


def exact(xq, sx, w_dense, sw, dtype):
    """The reference epilogue on the kernel's own quantized activations: exact integer sums, then * sx, then * sw."""
    acc = (xq.double() @ w_dense.double().t()).float()
    return (acc * sx[:, None] * sw[None, :]).to(dtype)


@gpu
def test_probe_measures_the_layouts_this_module_packs_for():
    got = i8_gemv.probe_sparse_layout("cuda")
    bad_a = {key: v for key, v in got["a"].items() if v is None} if not got["a_ok"] else {}
    assert got["a_ok"], f"A layout differs: {sorted(got['a'].items())[:40]} (undecodable: {len(bad_a)})"
    assert got["meta_ok"], f"metadata layout differs: {sorted(got['meta'].items())}"


@gpu
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "2:4"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_matches_reference_bit_for_bit(sparse, dtype, n, k):
    """Against the module references (tolerance) and, on the kernel's own quantized activations, the reference
    epilogue bit for bit, for 1..64 tokens (one, two, four and eight token tiles)."""
    from kernels.sparse24 import sparse24_w8a8_linear_ref
    from kernels.w8a8 import quantize_per_token, w8a8_linear_ref

    if k % i8_gemv.block_k(sparse):
        pytest.skip(f"blocks are {i8_gemv.block_k(sparse)} k")
    if sparse:
        q = make_sparse24(n, k, torch.int8, "cuda", seed=n * 3 + k)
        frag = i8_gemv.pack_meta_fragments(q["meta"], n, k)
        dense, sw = unpack_sparse24(q["values"], q["meta"], (n, k)), q["w_scale"]
        run = lambda x: i8_gemv.sparse24_w8a8_gemv(x, q["values"], frag, sw)  # noqa: E731
        ref = lambda x: sparse24_w8a8_linear_ref(x, q["values"], q["meta"], sw)  # noqa: E731
    else:
        dense, sw = make_w8a8(n, k, "cuda", seed=n + k)
        run = lambda x: i8_gemv.w8a8_gemv(x, dense, sw)  # noqa: E731
        ref = lambda x: w8a8_linear_ref(x, dense, sw)  # noqa: E731
    for m in (1, 2, 3, 8, 9, 16, 17, 32, 33, 64):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).to(dtype)
        out = run(x)
        assert out.shape == (m, n) and out.dtype == dtype
        assert rel_err(out, ref(x)) < TOL
        xq, sx = quantize_per_token(x, recip=True)
        assert torch.equal(out, exact(xq, sx, dense, sw.float(), dtype)), f"M={m}"


@gpu
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "2:4"])
@pytest.mark.parametrize("name", sorted(i8_gemv.VARIANTS))
def test_every_variant_split_and_launch_mode_gives_the_same_bytes(sparse, name):
    from kernels.w8a8 import quantize_per_token

    n, k = 1000, 2048
    w, sw, frag = gpu_layer(n, k, sparse, seed=9)
    kb = k // i8_gemv.block_k(sparse)
    for m in (1, 7, 12, 20, 64):
        xq, sx = quantize_per_token(torch.randn(m, k, device="cuda").half(), recip=True)
        # The whole K in one CTA stages 8 KB of 2:4 activations per block at 64 tokens: only the splits that fit.
        splits = [sp for sp in ((kb, 1), (1, kb), (3, -(-kb // 3))) if i8_gemv.smem_bytes(sp[0], m, name, sparse)
                  <= i8_gemv.SMEM_BYTES] + [None]
        outs = [i8_gemv.launch_quantized(xq, sx, w, sw, torch.float16, frag, name=name, pdl=pdl, split=split)
                for pdl in (0, 1, 2) for split in splits]
        assert all(torch.equal(o, outs[0]) for o in outs[1:]), f"M={m}: {[torch.equal(o, outs[0]) for o in outs]}"


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "2:4"])
def test_in_kernel_quantizer_gives_the_quantizer_kernels_bytes(dtype, sparse):
    """Every CTA quantizing x itself (flag bit 4) computes the same codes and scales as kernels.w8a8's quantizer: the
    same output bytes, for any token count, split and variant; x with huge and tiny rows (absmax ties, the 1e-8 floor)."""
    from kernels.w8a8 import quantize_per_token

    n, k = 700, 4096
    w, sw, frag = gpu_layer(n, k, sparse, seed=5)
    for m in (1, 2, 5, 16):
        x = torch.randn(m, k, device="cuda").to(dtype)
        x[0, 7] = 300.0  # one large outlier
        if m > 1:
            x[1] = 0  # an all-zero token: the 1e-8 floor
        xq, sx = quantize_per_token(x, recip=True)
        want = i8_gemv.launch_quantized(xq, sx, w, sw, dtype, frag)
        for name in ("w8b2s4", "w4b4s3"):
            for split in (None, (1, k // i8_gemv.block_k(sparse))):
                got = i8_gemv.launch_quantized(x, None, w, sw, dtype, frag, name=name, split=split)
                assert torch.equal(got, want), f"M={m} {name} split={split}"
        assert torch.equal(i8_gemv._launch(x, w, sw, frag, qin=True), want)


@gpu
def test_graph_replays_give_the_same_bytes():
    """The split-K workspace and counters are zero again after every launch: CUDA-graph replays repeat the output."""
    n, k = 4096, 14336
    w, sw = make_w8a8(n, k, "cuda", seed=3)
    q = make_sparse24(n, k, torch.int8, "cuda", seed=4)
    frag = i8_gemv.pack_meta_fragments(q["meta"], n, k)
    x = torch.randn(40, k, device="cuda").half()  # five token tiles' worth: the 8-tile build
    want = (i8_gemv.w8a8_gemv(x, w, sw), i8_gemv.sparse24_w8a8_gemv(x, q["values"], frag, q["w_scale"]))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = (i8_gemv.w8a8_gemv(x, w, sw), i8_gemv.sparse24_w8a8_gemv(x, q["values"], frag, q["w_scale"]))
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@gpu
def test_runtime_2_4_layer_offers_and_agrees_with_the_cuda_path():
    """Up to 64 tokens the 2:4 int8 layer offers the sparse tensor-core GEMV (metadata repacked once, also after the
    layer's meta changes, e.g. fused), and it computes the reference's math."""
    from compress.runtime.formats_compress import Sparse24Linear
    from compress.runtime.spec import LayerSpec

    n, k = 512, 1024
    q = make_sparse24(n, k, torch.int8, "cuda", seed=2)
    sp = Sparse24Linear(LayerSpec(name="s", format="compress.sparse24", in_features=k, out_features=n), torch.float16,
                        q["values"], q["meta"], q["w_scale"])
    for m in (1, 4, 16, 17, 64, 65):
        x = torch.randn(m, k, device="cuda").half()
        paths = dict(sp.kernel_paths(x))
        assert ("cuda_sp24" in paths) == (m <= 64), f"M={m}: {sorted(paths)}"
        if "cuda_sp24" in paths:
            assert rel_err(paths["cuda_sp24"](), sp.reference(x)) < TOL
    first = sp._meta_fragments()
    sp.meta = sp.meta.clone()  # a new meta tensor (as fusing gives): repacked, same registers
    again = sp._meta_fragments()
    assert again is not first and torch.equal(again, first)
