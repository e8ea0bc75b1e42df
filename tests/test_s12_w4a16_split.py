"""Session 12: the W4A16 tensor-core tiles' split-K by fill (kernels._common.plan_split_fill) and the per-shape table
that session 12's H100 sweep wrote (CPU: the planner counts the H100's 132 SMs off the GPU)."""

import json
from pathlib import Path

import pytest
import torch

from kernels import w4a16
from kernels._common import num_sms, plan_split_fill, plan_split_k

RESULTS = Path(__file__).resolve().parents[1] / "bench/results/h100/kernels_s12"
# the Llama-3 layers at 16..64 tokens; the runtime's fused ones; three of the Llama-3 layers at 256 tokens
PICKS = [RESULTS / "call4/picks.json", RESULTS / "call8/picks.json", RESULTS / "call12/picks.json"]
CPU = torch.device("cpu")


def test_fill_rounds_the_grid_down_to_whole_waves():
    assert num_sms(CPU) == 132
    assert [plan_split_fill(t, 16, CPU) for t in (16, 32, 33, 64, 112, 200)] == [8, 4, 4, 2, 1, 1]
    assert plan_split_fill(64, 16, CPU, 2.0) == 4 and plan_split_fill(112, 16, CPU, 2.0) == 2
    assert plan_split_fill(1, 5, CPU) == 5  # never more splits than K steps
    assert plan_split_fill(40, 7, CPU) == 3  # 3 splits of 3, 3, 1 steps: none empty
    # the rule plan_split_k keeps for the other kernels rounds up: 56 tiles x 5 splits = 280 programs > 2 waves
    assert plan_split_k(56, 32, CPU, 2.0) == 5 and plan_split_fill(56, 32, CPU, 2.0) == 4


def test_shape_table_gives_the_sweeps_splits_on_132_sms():
    """Every pick of session 12's H100 sweeps (calls 4, 8 and 12) is in SHAPE_TUNED with the same tile and, through its
    fill, the same split on 132 SMs: the table is the measurement, written portably."""
    picks: dict[str, dict] = {}
    for path in PICKS:
        for nk, by in json.loads(path.read_text()).items():
            picks.setdefault(nk, {}).update(by)
    assert len(picks) == 14 and sum(len(by) for by in picks.values()) == 38
    for nk, by in picks.items():
        n, k = map(int, nk.split(","))
        for bucket, pick in by.items():
            cfg = w4a16.SHAPE_TUNED[(n, k)][int(bucket)]
            assert {kk: v for kk, v in cfg.items() if kk != "fill"} == {kk: v for kk, v in pick.items() if kk != "split"}
            tiles = -(-n // cfg["BN"]) * -(-int(bucket) // cfg["BM"])
            steps = -(-(k // 128) // cfg["NB"])
            assert plan_split_fill(tiles, steps, CPU, cfg["fill"]) == pick["split"], (nk, bucket)


@pytest.mark.parametrize("m", [17, 40, 64])
def test_m_table_above_16_tokens_fills_one_wave(m):
    cfg = w4a16._config(m, 100, 4096)  # a shape no table lists
    assert cfg["kind"] == "tc" and cfg["fill"] == 1.0 and cfg["BM"] >= min(m, 32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n,k", sorted(w4a16.SHAPE_TUNED))
def test_shape_table_on_the_real_shapes_gpu(n, k):
    """Each table entry on its own layer shape at the edges of its bucket: the reference's values, the same bytes
    twice (the split-K tail sums in a fixed order)."""
    from kernels.cases import make_int4

    p = make_int4(n, k, 128, True, torch.float16, "cuda", seed=n + k)
    for bucket in w4a16.SHAPE_TUNED[(n, k)]:
        for m in ({16: 2, 32: 17, 64: 33, 256: 65}[bucket], bucket):
            x = torch.randn(m, k, device="cuda").half()
            out = w4a16.w4a16_linear(x, p["qweight"], p["scales"])
            ref = w4a16.w4a16_linear_ref(x, p["qweight"], p["scales"])
            assert ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 3e-3, (n, k, m)
            assert torch.equal(out, w4a16.w4a16_linear(x, p["qweight"], p["scales"]))
