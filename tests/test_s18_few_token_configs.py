"""Session 18: the launch configs its H100 sweeps changed (bench/results/h100/kernels_s18/README.md).

- W8A8 at 3..4 tokens on layers of at most 4096 output rows: the few-token GEMV (`kernels.w8a8.GEMV_SMALL`) instead
  of the GEMM; larger layers, more tokens and calls without the layer's shape keep the GEMM.
- (The W8A16 2:4 one-token tiles are in tests/test_s17_sparse24_w8a16.py.)
"""

from __future__ import annotations

import pytest
import torch

from kernels.cases import make_w8a8, rel_err
from kernels.w8a8 import GEMV_SMALL, _config, _config_s8, w8a8_linear, w8a8_linear_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_small_layers_take_the_gemv_at_three_and_four_tokens():
    for m in (3, 4):
        assert _config(m, 4096, 4096) == GEMV_SMALL  # 8B q/o
        assert _config(m, 1024, 8192) == GEMV_SMALL  # 70B k/v
        assert _config(m, 4096, 14336) == GEMV_SMALL  # 8B down: even in the sweep, the GEMV's one weight pass
        assert _config(m, 8192, 8192) == _config_s8(m)  # 70B q/o stays on the GEMM
        assert _config(m) == _config_s8(m)  # no shape given: the GEMM
    assert _config(5, 4096, 4096) == _config_s8(5) and _config(8, 1024, 4096) == _config_s8(8)
    assert _config(2, 4096, 4096)["kind"] == "gemv"  # 1..2 tokens were the GEMV already


@pytest.mark.parametrize("m", [3, 4])
@pytest.mark.parametrize("n, k", [(48, 64), (40, 320)])
def test_the_small_layer_gemv_matches_the_reference(m, n, k):
    wq, ws = make_w8a8(n, k, DEVICE, seed=n + k + m)
    x = torch.randn(m, k, device=DEVICE).half()
    assert _config(m, n, k)["kind"] == "gemv"
    assert rel_err(w8a8_linear(x, wq, ws), w8a8_linear_ref(x, wq, ws)) < 3e-3


def test_kernel_tune_sweeps_the_w8a16_24_gemv_tilings():
    # `python -m compress.bench.kernel_tune sparse24` sweeps these at one token; each must run and match the reference
    from compress.bench.kernel_tune import _w16_configs
    from kernels import sparse24 as sp
    from kernels.cases import make_sparse24

    cfgs = _w16_configs(1)
    for n, k in ((28672, 8192), (4096, 4096), (1024, 8192), (14336, 4096), (8192, 28672)):
        assert sp._config_w8a16(1, n, k) in cfgs  # the served ones
    p = make_sparse24(40, 256, torch.int8, DEVICE, seed=3)
    x = torch.randn(1, 256, device=DEVICE).half()
    want = sp.sparse24_w8a16_linear_ref(x, p["values"], p["meta"], p["w_scale"])
    for cfg in cfgs:
        assert rel_err(sp.sparse24_w8a16_linear_tiled(x, p["values"], p["meta"], p["w_scale"], cfg), want) < 3e-3, cfg
