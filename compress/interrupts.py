"""Ctrl-C and SIGTERM that a run cannot lose.

Python runs a signal handler at the next bytecode of the main thread. When that bytecode belongs to a
finalizer (`__del__`, a weakref callback: `gc.collect()` after dropping a model runs thousands), the
KeyboardInterrupt it raises is "ignored" and the run goes on as if nothing was pressed. Measured: a
SIGINT sent 30-200 ms into `compress run`'s save phase on stories260K landed in `regex`'s
`Group.__del__` and the run finished with exit 0.

So the handler also records the signal, and the points that matter look at the record:
- `check()` raises KeyboardInterrupt if a signal came and was swallowed (phase boundaries call it);
- `deferred()` holds signals back over a few renames that must not be cut in half, then raises;
- `committed` names the checkpoint folders this process finished, so the CLI can say whether an
  interrupt came before or after the checkpoint was whole.

SIGINT is only taken over when it has Python's default handler: a process started with SIGINT
ignored (`nohup`, a background job) keeps ignoring it, as Python itself does.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path

_pending: list[int] = []  # signals received and not yet turned into a KeyboardInterrupt that got through
_holding = [0]  # > 0 inside deferred(): record only
_depth = [0]  # nesting of watched()
committed: list[Path] = []


def _on_signal(signum, frame):
    _pending.append(signum)
    if not _holding[0]:
        raise KeyboardInterrupt


def _install() -> dict:
    """Our handler for SIGINT (if at Python's default) and SIGTERM (if at the OS default); returns the old ones."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # signal.signal only works in the main thread; there the signals reach the main thread anyway
    old = {}
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) in (default, _on_signal):
            old[sig] = signal.signal(sig, _on_signal)
    return old


@contextlib.contextmanager
def watched():
    """Within: SIGINT / SIGTERM raise KeyboardInterrupt and are remembered. Nests; the outermost one
    restores the old handlers, forgets what was recorded, and raises KeyboardInterrupt on a normal exit
    if a signal came whose KeyboardInterrupt was swallowed on the way."""
    old = _install()
    _depth[0] += 1
    try:
        yield
    except BaseException:
        if _depth[0] == 1:
            _pending.clear()  # leaving by an exception (a KeyboardInterrupt that got through, or an error)
        raise
    finally:
        _depth[0] -= 1
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if not _depth[0]:
        check()


def check() -> None:
    """Raise KeyboardInterrupt if a signal arrived whose KeyboardInterrupt may have been swallowed."""
    if _pending:
        _pending.clear()
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred():
    """Signals inside only get recorded; on leaving, a recorded one raises KeyboardInterrupt."""
    _holding[0] += 1
    try:
        yield
    finally:
        _holding[0] -= 1
    if not _holding[0]:
        check()


def reset() -> None:
    """Forget recorded signals and committed folders (the start of a command)."""
    _pending.clear()
    committed.clear()
