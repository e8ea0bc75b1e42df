"""Write a checkpoint folder atomically: build it in a hidden sibling, rename it into place at the end.

A run that fails or is interrupted (Ctrl-C, SIGTERM) removes its temporary folder and never touches
an existing checkpoint unless `force` was given; with `force`, the old folder is swapped out only
after the new one is complete.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from compress import interrupts
from compress.errors import CompressError


def check_output(output: Path, force: bool) -> None:
    """Fail early (before any work) if `output` exists and may not be replaced."""
    if output.exists() and not force:
        raise CompressError(f"--output {output} already exists: pass --force to replace it, or choose another folder")
    if output.exists() and not output.is_dir():
        raise CompressError(f"--output {output} exists and is not a folder: remove it or choose another path")


@contextlib.contextmanager
def atomic_folder(output: Path, force: bool):
    """Yield a temporary folder; on normal exit move it to `output`, on any error delete it.

    Ctrl-C / SIGTERM anywhere before the move, even one Python swallowed in a finalizer
    (compress.interrupts), abandons the folder; one during the move lets the move finish first."""
    output = output.resolve()
    check_output(output, force)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.parent / f".{output.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        with interrupts.watched():
            yield tmp
            interrupts.check()
            with interrupts.deferred():  # two renames with --force: never leave `output` missing
                if output.exists():  # only reachable with force: swap, then drop the old one
                    old = output.parent / f".{output.name}.old-{os.getpid()}"
                    output.rename(old)
                    tmp.rename(output)
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    tmp.rename(output)
                interrupts.committed.append(output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
