"""QuantLinear.forward runs the path the table chose without listing the layer's paths again (compress/runtime/
qlinear.py): listing asks every kernel whether it supports the call, in Python, on every call. On this CPU machine the
table measures with the host clock (`measure_on_cpu`) and the kernels run in Triton's interpreter."""

import copy
import pickle
from functools import partial

import pytest
import torch

from compress.runtime.paths import TABLE
from kernels.cases import int4_runtime_layer


@pytest.fixture
def measured_table(monkeypatch):
    monkeypatch.setattr(TABLE, "measure_on_cpu", True)
    TABLE.clear()
    yield TABLE
    TABLE.clear()


def _counting(layer):
    """The layer's own kernel_paths, counted."""
    calls = []
    real = layer.kernel_paths

    def kernel_paths(x2d):
        calls.append(x2d.shape)
        return real(x2d)

    layer.kernel_paths = kernel_paths
    return calls


def test_the_chosen_path_runs_without_listing_the_paths_again(measured_table):
    layer = int4_runtime_layer(64, 256, True, "cpu", seed=1)
    calls = _counting(layer)
    xs = [torch.randn(1, 256, generator=torch.Generator().manual_seed(i)).half() for i in range(3)]
    layer(xs[0])
    assert len(calls) == 1 and len(measured_table.choice) == 1
    chosen = next(iter(measured_table.choice.values()))
    for x in xs:
        # The same bytes as listing the paths (the class's method, not the counted one) and running the chosen one.
        assert torch.equal(layer(x), dict(type(layer).kernel_paths(layer, x))[chosen]())
    assert len(calls) == 1  # listed once, for the measurement
    with measured_table.recording() as used:  # what --tune-paths tunes: the keys a step serves, this way too
        layer(xs[0])
    assert used == set(measured_table.choice)


def test_a_new_choice_or_new_tensors_list_the_paths_again(measured_table):
    layer = int4_runtime_layer(64, 256, False, "cpu", seed=2)
    calls = _counting(layer)
    x = torch.randn(2, 256).half()
    layer(x)
    layer(x)
    assert len(calls) == 1
    measured_table.clear()  # the table forgot its choice: measured again
    layer(x)
    assert len(calls) == 2
    layer.to("cpu")  # .to() and friends may give the layer new tensors: the cache is dropped
    layer(x)
    assert len(calls) == 3
    layer(x)
    assert len(calls) == 3


def test_copies_pickle_and_use_their_own_tensors(measured_table):
    layer = int4_runtime_layer(64, 256, True, "cpu", seed=3)
    x = torch.randn(1, 256).half()
    want = layer(x)
    twin = copy.deepcopy(layer)
    layer.scales.zero_()  # the original's scales only
    assert torch.equal(twin(x), want)
    assert not torch.equal(layer(x), want)
    again = pickle.loads(pickle.dumps(twin))
    assert torch.equal(again(x), want)


def test_paths_holding_tensors_computed_from_the_input_are_not_cached():
    layer = int4_runtime_layer(64, 256, True, "cpu", seed=4)
    x2d = torch.randn(1, 256).half()

    def path(x, *rest, **kw):
        return x

    assert layer._rebindable(partial(path, x2d, layer.qweight, 7, s=layer.scales), x2d) == (
        path, (layer.qweight, 7), {"s": layer.scales})
    assert layer._rebindable(partial(path, x2d, x2d * 2), x2d) is None  # derived from this call's input
    assert layer._rebindable(partial(path, x2d.clone()), x2d) is None   # not this call's input first
    assert layer._rebindable(lambda: x2d, x2d) is None                  # a closure: cannot be re-pointed
