"""k-means centroid sums (_segment_sums, a prefix sum over the points sorted by cluster, transposed so that CUDA
scans the innermost dimension): per-cluster sums, empty clusters zero, expanded inputs accepted. Bits on the
CPU were checked against the previous (n, d) layout when it changed (identical on 10^5 x 8 points)."""

import torch

from compress.vptq.kmeans import _segment_sums


def test_segment_sums_equal_in_order_cluster_sums():
    g = torch.Generator().manual_seed(0)
    n, k = 3000, 64
    values = torch.randn(n, 8, generator=g) * torch.rand(n, 1, generator=g) * 100
    assign = torch.randint(0, k - 1, (n,), generator=g)  # cluster k-1 stays empty
    got = _segment_sums(values, assign, k)
    want = torch.zeros(k, 8, dtype=torch.float64)
    for c in range(k):
        want[c] = values[assign == c].double().sum(0)
    assert got.shape == (k, 8) and got.dtype == torch.float64
    assert torch.equal(got[k - 1], torch.zeros(8, dtype=torch.float64))
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-9)


def test_segment_sums_take_expanded_weights():
    w = torch.ones(10, 1).expand(10, 4)  # weighted_kmeans passes an expanded (n, v) view
    assign = torch.tensor([0, 1, 1, 2, 2, 2, 0, 0, 0, 0])
    assert torch.equal(_segment_sums(w, assign, 3), torch.tensor([[5.0] * 4, [2.0] * 4, [3.0] * 4], dtype=torch.float64))
