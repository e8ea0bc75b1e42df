"""Ctrl-C that Python swallows in a finalizer still stops the run (compress.interrupts, compress.atomic).

Real signals to this process (signal.raise_signal), delivered inside a real `__del__`, where Python
reports the KeyboardInterrupt as "ignored" and carries on: the case measured in `compress run`'s save
phase (a SIGINT landing in `regex`'s Group.__del__ during gc.collect()).
"""
from __future__ import annotations

import gc
import signal

import pytest
import typer

from compress import interrupts
from compress.atomic import atomic_folder

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def sigint_as_at_a_terminal():
    # A suite started in the background has SIGINT ignored; a user at a terminal has Python's default.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.reset()
    yield
    signal.signal(signal.SIGINT, old)
    interrupts.reset()


class _SignalsWhenCollected:
    def __init__(self, sig=signal.SIGINT):
        self.sig = sig

    def __del__(self):
        signal.raise_signal(self.sig)  # the handler runs right here, inside the finalizer


def _swallow(sig=signal.SIGINT):
    """Deliver `sig` inside a finalizer; Python ignores the KeyboardInterrupt the handler raises."""
    obj = _SignalsWhenCollected(sig)
    obj.cycle = obj  # only the cycle collector frees it, as after `del model`
    del obj
    gc.collect()


def test_python_really_swallows_it_without_us():
    _swallow()  # no exception: this is the loss being guarded against


def test_check_raises_what_a_finalizer_swallowed():
    with interrupts.watched():
        _swallow()
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        interrupts.check()  # reported once


def test_watched_raises_on_a_normal_exit_after_a_swallowed_signal():
    with pytest.raises(KeyboardInterrupt):
        with interrupts.watched():
            _swallow()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_atomic_folder_abandons_the_checkpoint_after_a_swallowed_signal(tmp_path, sig):
    out = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(out, force=False) as tmp:
            (tmp / "model.safetensors").write_bytes(b"x")
            _swallow(sig)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert not interrupts.committed


def test_atomic_folder_with_force_keeps_the_old_checkpoint_after_a_swallowed_signal(tmp_path):
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(out, force=True) as tmp:
            (tmp / "new.txt").write_text("new")
            _swallow()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"] and (out / "old.txt").read_text() == "old"


def test_deferred_lets_the_work_finish_then_raises():
    done = []
    with interrupts.watched():
        with pytest.raises(KeyboardInterrupt):
            with interrupts.deferred():
                signal.raise_signal(signal.SIGINT)  # recorded, not raised here
                done.append(True)
    assert done == [True]


def test_a_process_that_ignores_sigint_keeps_ignoring_it():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with interrupts.watched():
        signal.raise_signal(signal.SIGINT)
        interrupts.check()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_cli_says_whether_the_checkpoint_was_whole(tmp_path, capsys):
    from compress.cli import user_errors

    @user_errors
    def before_commit():
        raise KeyboardInterrupt

    @user_errors
    def after_commit():
        with atomic_folder(tmp_path / "ckpt", force=False):
            pass
        raise KeyboardInterrupt

    for fn, words in ((before_commit, "no checkpoint was written"), (after_commit, f"{tmp_path / 'ckpt'} is whole")):
        with pytest.raises(typer.Exit) as e:
            fn()
        assert e.value.exit_code == 130 and words in capsys.readouterr().err
