"""The CUDA C++ libraries the CPU tests build for the H100 (sm_90a) with this machine's nvcc, and their background build.

Each build takes 10-115 s of one core on a 2-core CI machine, about a fifth of the whole suite, and nvcc leaves the
test process idle meanwhile. So conftest starts one child process in Linux's idle scheduling class (`python -m
tests.sm90_builds NAME...`) that builds the libraries the collected tests need, in the order they run, into one
folder for the session, on whatever core the Python tests leave idle. A compile test asks for its library through
`build(name)`, the same call: `kernels.cuda_build`'s lock file makes it wait for the child's nvcc if that build is
running, find the library if it is done, or run nvcc itself if the child has not reached it (or failed: the test
then reports nvcc's error). The tests check the same libraries as before; only when nvcc runs moves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

ARCH = "90a"
ENV = "COMPRESS_KERNEL_CACHE"


def _i8_gemv() -> list[Path]:
    from kernels import i8_gemv

    return [i8_gemv.compile_variant(ARCH, name) for name in i8_gemv.VARIANTS]


def _sp24_w16_gemv() -> list[Path]:
    from kernels import sp24_w16_gemv

    return [sp24_w16_gemv.compile_variant(ARCH, name) for name in sp24_w16_gemv.VARIANTS]


def _w4a16(xform: bool) -> Callable[[], Path]:
    def build() -> Path:
        from kernels import w4a16_cuda

        return w4a16_cuda.compile_variant(ARCH, w4a16_cuda.DEFAULT_VARIANT, xform=xform)

    return build


def _w4a16_two_row_tiles() -> Path:
    from kernels import w4a16_cuda

    return w4a16_cuda.compile_variant(ARCH, sorted(w4a16_cuda.ROW_TILES)[0])


def _w4a16_shared_tile() -> Path:
    from kernels import w4a16_cuda

    return w4a16_cuda.compile_variant(ARCH, "w8b2s3k4")


def _vptq_gemm() -> Path:
    from kernels import vptq_gemm_cuda

    return vptq_gemm_cuda.compile_for(ARCH)


def _vptq_cluster() -> Path:
    from kernels import vptq_cluster

    return vptq_cluster.compile_pair(ARCH, 13, 9)


BUILDS: dict[str, Callable[[], Path | list[Path]]] = {
    "i8_gemv": _i8_gemv,  # every variant
    "sp24_w16_gemv": _sp24_w16_gemv,  # every variant
    "w4a16": _w4a16(False),  # the default variant
    "w4a16_xform": _w4a16(True),  # the default variant with the fused input transforms
    "w4a16_two_row_tiles": _w4a16_two_row_tiles,
    "w4a16_shared_tile": _w4a16_shared_tile,  # four warps a row tile (session 25)
    "vptq_gemm": _vptq_gemm,
    "vptq_cluster": _vptq_cluster,  # 8192 + 512 centroids
}


def build(name: str) -> Path | list[Path]:
    """The library (libraries) of `name`, built into the folder in $COMPRESS_KERNEL_CACHE unless already there."""
    return BUILDS[name]()


def _lowest_priority() -> None:
    """In the child before it runs: the idle class (nice 19 where there is none), and killed with pytest if pytest
    itself is killed (Linux), so no build outlives the session for long."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass


class Background:
    """The low-priority child building `names` into `folder` (a new temporary folder unless given)."""

    def __init__(self, names: list[str], folder: Path | None = None):
        self.folder = folder or Path(tempfile.mkdtemp(prefix="compress-sm90-"))
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, ENV: str(self.folder), "PYTHONPATH": os.pathsep.join(
            filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        # The idle scheduling class (nice 19 where there is none): the child and its nvcc get a core only when no test
        # thread wants it. Under plain nice 19 the torch-heavy tests still lost time to it (session 23: the ctrl-C
        # test 14 -> 36 s), torch's OpenMP threads waiting for a core the compiler held. Own session: stop() ends
        # nvcc's children too.
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.sm90_builds", *names], cwd=root, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_lowest_priority,
                                     start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        try:
            build(arg)
        except Exception:  # the test that needs it builds it again and reports the error
            pass
