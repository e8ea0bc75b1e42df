"""kernels/cuda_build.py: one nvcc build per library (source, included headers, flags, architecture), across
processes, landed whole or not at all."""

import ctypes
import fcntl
import threading
import time
from pathlib import Path

import pytest

from compress.errors import CompressError
from kernels import cuda_build

pytestmark = pytest.mark.skipif(cuda_build.nvcc() is None, reason="nvcc not installed")
SOURCE = 'extern "C" int answer() { return ANSWER; }\n__global__ void touch(int *p) { *p = ANSWER; }\n'
FLAGS = ["-DANSWER=42"]


def _nvcc_children() -> list[str]:
    """This process's running nvcc children (Linux /proc)."""
    kids = [k for task in Path("/proc/self/task").iterdir() for k in (task / "children").read_text().split()]
    return [k for k in kids if Path(f"/proc/{k}/comm").read_text().strip() == "nvcc"]


def _build(src, flags=FLAGS):
    return cuda_build.compile_library(src, "t", flags, "90a", "test kernel", "nothing else runs")


def test_a_build_waits_for_the_one_in_flight_then_reuses_the_library(tmp_path, monkeypatch):
    """While another process holds a library's lock (it is building that library), a request for it waits instead
    of running a second nvcc beside it; once the lock is free it builds the library (or finds it), and later
    requests reuse the file."""
    monkeypatch.setenv("COMPRESS_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "answer.cu"
    src.write_text(SOURCE)
    lib = cuda_build.library_path(src, "t", FLAGS, "90a")
    lib.parent.mkdir(parents=True)
    holder = open(lib.with_suffix(".lock"), "w")
    fcntl.flock(holder, fcntl.LOCK_EX)  # as another process's build would
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("lib", _build(src)))
    waiter.start()
    time.sleep(1.0)
    assert waiter.is_alive() and not _nvcc_children() and not lib.exists()  # waiting, no nvcc of its own
    holder.close()  # that build ended without a library (killed, say): the waiter builds it
    waiter.join(timeout=300)
    assert result["lib"] == lib and ctypes.CDLL(str(lib)).answer() == 42
    built = lib.stat().st_mtime_ns
    assert _build(src) == lib and lib.stat().st_mtime_ns == built  # found, not rebuilt
    src.write_text(SOURCE + "// edited\n")
    assert cuda_build.library_path(src, "t", FLAGS, "90a") != lib  # an edited source is another library


def test_a_failed_build_says_what_failed_and_leaves_no_library(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPRESS_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "broken.cu"
    src.write_text("this is not C++\n")
    with pytest.raises(CompressError, match="test kernel: nvcc failed"):
        _build(src, [])
    assert not list((tmp_path / "cache").glob("*.so")) and not list((tmp_path / "cache").glob("*.tmp"))
