"""The VPTQ fit's fast paths compute what the plain torch calls they replace compute (issue 4: speed
without changing results): blockwise row max / top-k against max / topk, and whole fits with the fast
paths against the same code with the plain calls patched back in, byte for byte."""

import pytest
import torch

import compress.vptq.kmeans as km
from compress.vptq import VPTQConfig, fit_vptq
from compress.vptq.kmeans import _row_max, _row_topk


def _plain_max(score):
    return score.max(dim=1)


def _plain_topk(score, m):
    return score.topk(m, dim=1).indices


def _scores(rows=300, k=4096, seed=0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(rows, k, generator=gen)
    # Exact ties at the top, in one block and across blocks: max(dim=1) returns the first index.
    s[0, 5] = s[0, 70] = s[0, 4000] = 10.0
    s[1, 4095] = s[1, 64] = 11.0
    s[2, 63] = s[2, 64] = 12.0
    return s


def test_row_max_is_max_bit_for_bit_including_ties():
    s = _scores()
    best, idx = _row_max(s)
    ref_best, ref_idx = s.max(dim=1)
    assert torch.equal(best, ref_best) and torch.equal(idx, ref_idx)
    assert idx[:3].tolist() == [5, 64, 63]


def test_row_topk_gives_topk_values():
    s = _scores()
    s[3, 100:110] = 9.0  # ten equal scores competing for eight places
    got = _row_topk(s, 8)
    ref = s.topk(8, dim=1)
    assert torch.equal(s.gather(1, got), ref.values)  # same values, largest first
    assert all(len(set(r)) == 8 for r in got.tolist())  # no index twice


def _layer(n=128, k=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    x = torch.randn(2048, k, generator=gen) * torch.exp(torch.randn(k, generator=gen))
    return w, x.t() @ x / 2048


@pytest.mark.parametrize("beam", [1, 8])
def test_fit_with_fast_paths_equals_plain_torch(monkeypatch, beam):
    # k = 2048 main centroids: large enough for both blockwise paths (_row_max needs k >= 512, _row_topk
    # more than 2 * beam blocks of 64), so this fails if either changes a single index.
    w, h = _layer()
    cfg = VPTQConfig(vector_len=4, num_centroids=2048, num_res_centroids=16, res_beam=beam, scope="layer", kmeans_iters=4)
    fast = fit_vptq(w, h, cfg)
    monkeypatch.setattr(km, "_row_max", _plain_max)
    monkeypatch.setattr(km, "_row_topk", _plain_topk)
    plain = fit_vptq(w, h, cfg)
    for name in ("codebook", "indices", "res_codebook", "res_indices", "scale"):
        assert torch.equal(getattr(fast, name), getattr(plain, name)), name
    assert fast.extra["proxy_loss"] == plain.extra["proxy_loss"]


def test_assignment_restores_thread_count():
    # The column loop runs on one thread (fit.gptq_assign); the caller's setting must come back.
    before = torch.get_num_threads()
    w, h = _layer(n=16, k=24)
    fit_vptq(w, h, VPTQConfig(vector_len=4, num_centroids=16, scope="layer", kmeans_iters=2))
    assert torch.get_num_threads() == before


def test_fast_paths_are_taken_at_the_test_sizes(monkeypatch):
    # Guards the tests above: if a threshold moves, they would compare the plain path with itself.
    calls = []
    real_max, real_topk = km._row_max, km._row_topk
    monkeypatch.setattr(km, "_row_max", lambda s: calls.append(("max", s.shape[1])) or real_max(s))
    monkeypatch.setattr(km, "_row_topk", lambda s, m: calls.append(("topk", s.shape[1])) or real_topk(s, m))
    w, h = _layer()
    fit_vptq(w, h, VPTQConfig(vector_len=4, num_centroids=2048, num_res_centroids=16, res_beam=8, scope="layer", kmeans_iters=1))
    assert ("max", 2048) in calls and ("topk", 2048) in calls
    assert 2048 // km._MAX_BLOCK > 2 * 8 and 2048 >= 8 * km._MAX_BLOCK
