"""compress.bench.kernel_timing on the CPU: the rotating-weights method's copies (count, fresh storage, pytrees
and modules), the method check, and the report header sentence. The timing itself needs a GPU (run by
`compress bench kernels` on the device)."""

import pytest
import torch

from compress.bench.kernel_timing import (L2_MULTIPLE, MIN_CALLS, call_ms, check_method, clone_weights, copies_needed,
                                          method_description, weight_bytes, weight_copies)
from compress.errors import CompressError


def test_copies_cover_the_l2_multiple():
    l2 = 50 * 2**20
    assert copies_needed(4 * 2**20, l2) == 32  # 8B k/v int8: 4 MiB -> 32 copies = 128 MiB >= 2.5 x 50 MiB
    assert copies_needed(4 * 2**20, l2) * 4 * 2**20 >= L2_MULTIPLE * l2
    assert copies_needed(470 * 2**20, l2) == 2  # larger than the L2 already: still two, never the same twice in a row
    assert copies_needed(0, l2) >= 2


def test_weight_bytes_counts_each_storage_once():
    w = torch.zeros(10, 8, dtype=torch.int8)
    s = torch.zeros(10, dtype=torch.float32)
    assert weight_bytes((w, s)) == 80 + 40
    assert weight_bytes({"a": w, "b": w.t(), "n": 3, "none": None}) == 80  # a view shares its storage
    lin = torch.nn.Linear(4, 3, bias=False).half()
    assert weight_bytes(lin) == 24


def test_clone_weights_gives_fresh_storage_and_keeps_layout():
    w = torch.arange(12, dtype=torch.int8).reshape(3, 4)
    tree = {"w": w, "wt": w.t(), "bits": 4, "none": None, "pair": (w, [w])}
    c = clone_weights(tree)
    assert c["bits"] == 4 and c["none"] is None
    assert torch.equal(c["w"], w) and c["w"].data_ptr() != w.data_ptr()
    assert c["wt"].stride() == w.t().stride()  # a column-major view stays column-major (torch._int_mm's operand)
    assert isinstance(c["pair"], tuple) and isinstance(c["pair"][1], list)
    lin = torch.nn.Linear(4, 3)
    lc = clone_weights(lin)
    assert torch.equal(lc.weight, lin.weight) and lc.weight.data_ptr() != lin.weight.data_ptr()


def test_clone_module_clones_plain_tensor_attributes_and_shares_the_rest():
    class Peer(torch.nn.Module):  # like a third-party layer: packed tensors as plain attributes, a kernel object
        def __init__(self):
            super().__init__()
            self.W_q = torch.arange(8, dtype=torch.int32)
            self.meta = [torch.ones(2), 3]
            self.kernel = object()
            self.inner = torch.nn.Linear(2, 2)
            self.register_buffer("scales", torch.ones(3))

        def forward(self, x):
            return x

    p = Peer()
    c = clone_weights(p)
    assert c.kernel is p.kernel and c.meta[1] == 3
    for a, b in ((c.W_q, p.W_q), (c.meta[0], p.meta[0]), (c.scales, p.scales), (c.inner.weight, p.inner.weight)):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert weight_bytes(c) == weight_bytes(p) == 8 * 4 + 2 * 4 + 3 * 4 + (4 + 2) * 4


def test_weight_copies_first_is_the_original():
    w = torch.ones(256, 256, dtype=torch.float16)  # 128 KiB on the CPU: L2 default 50 MiB -> 1000 copies
    sets = weight_copies((w,), "cpu")
    assert sets[0][0] is w and len(sets) == copies_needed(w.numel() * 2, 50 * 2**20)
    assert len({s[0].data_ptr() for s in sets}) == len(sets)


def test_method_names_are_checked_and_described():
    assert check_method("rotate") == "rotate" and check_method("flush") == "flush"
    with pytest.raises(CompressError, match="timing method 'warm'"):
        check_method("warm")
    with pytest.raises(CompressError, match="timing method"):
        call_ms(lambda w: w, None, "warm")
    text = method_description("rotate", "cpu")
    assert f">= {MIN_CALLS} times" in text and "2.5x the 50 MB L2" in text
    assert "flushed" in method_description("flush", "cpu")
