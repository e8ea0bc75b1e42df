"""Build a CUDA C++ source of kernels/csrc into a shared library with nvcc on first use, for ctypes.

The sources include no torch headers, so nvcc builds each in seconds; the library is cached under
~/.cache/compress/kernels (COMPRESS_KERNEL_CACHE), keyed by the source bytes, the GPU architecture and
the build flags, so an edited source (or a local header it includes) or another GPU gets its own build. Processes that
ask for the same library at once build it once: the others wait on its lock file.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Callable, Hashable

import torch

from compress.errors import CompressError


def nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def device_index(device: torch.device) -> int:
    """The index of a CUDA device ("cuda" without one: the current device)."""
    return device.index if device.index is not None else torch.cuda.current_device()


# torch's handle of a device's current stream without building a torch.cuda.Stream object (what torch.compile's
# generated launchers call): 0.1-0.2 us against 5-8.5 us for torch.cuda.current_stream(device).cuda_stream, on every
# launch (H200, session 39, bench/results/h200/kernels_s39/launch_cost.py). CUDA builds of torch only, so
# `stream_handle` falls back to the public call elsewhere.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_handle(device: torch.device) -> int:
    """The current CUDA stream of `device` as the integer the ctypes launchers pass on (cudaStream_t)."""
    if _raw_stream is not None:
        return _raw_stream(device_index(device))
    return torch.cuda.current_stream(device).cuda_stream


_CAPABILITY: dict[int, tuple[int, int]] = {}


def capability(device: torch.device) -> tuple[int, int]:
    """(major, minor) of a CUDA device, cached per device index: the launchers ask on every call (their library key,
    whether they may launch with programmatic dependent launch), and torch's lookup is a properties query."""
    idx = device_index(device)
    if idx not in _CAPABILITY:
        _CAPABILITY[idx] = torch.cuda.get_device_capability(idx)
    return _CAPABILITY[idx]


def arch(device: torch.device) -> str:
    """The nvcc architecture of a CUDA device ("90a")."""
    return arch_of(*capability(device))


def arch_of(major: int, minor: int) -> str:
    suffix = "a" if (major, minor) == (9, 0) else ""  # sm_90a: Hopper's own instruction set
    return f"{major}{minor}{suffix}"


def source_bytes(src: Path) -> bytes:
    """The source and every local header it includes (`#include "name"`, beside it), for the cache key: an
    edited shared header must rebuild each library that includes it."""
    data = src.read_bytes()
    for name in re.findall(rb'^\s*#include\s+"([^"]+)"', data, flags=re.M):
        header = src.parent / name.decode()
        if header.is_file():
            data += source_bytes(header)
    return data


def cache_dir() -> Path:
    """The folder of built libraries: $COMPRESS_KERNEL_CACHE, else ~/.cache/compress/kernels."""
    return Path(os.environ.get("COMPRESS_KERNEL_CACHE", Path.home() / ".cache" / "compress" / "kernels"))


def library_path(src: Path, name: str, flags: list[str], arch_code: str) -> Path:
    """Where the library of this source (and the headers it includes), flags and architecture is cached."""
    key = hashlib.sha256(source_bytes(src) + " ".join([arch_code, *flags]).encode()).hexdigest()[:16]
    return cache_dir() / f"{src.stem}_{name}_{key}.so"


def compile_library(src: Path, name: str, flags: list[str], arch_code: str, what: str, fallback: str) -> Path:
    """Path of the built library `<src stem>_<name>_<key>.so` (built now if not cached).

    `what` names the kernel and `fallback` says what runs instead, for the error messages.
    """
    exe = nvcc()
    if exe is None:
        raise CompressError(f"{what}: nvcc not found (set CUDA_HOME); {fallback}")
    lib = library_path(src, name, flags, arch_code)
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    # One build per library across processes: a second process asking for a library another one is building waits
    # for it (a lock file beside it) instead of running nvcc again for minutes; the build still lands by rename, so a
    # killed build leaves no library behind.
    with open(lib.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not lib.exists():
            tmp = lib.with_suffix(f".{os.getpid()}.tmp")
            cmd = [exe, "-O3", "-std=c++17", "-diag-suppress=177", *flags,
                   f"-gencode=arch=compute_{arch_code},code=sm_{arch_code}", "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp),
                   str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise CompressError(f"{what}: nvcc failed ({' '.join(cmd)}): {res.stderr.strip()[-2000:]}")
            os.replace(tmp, lib)
    return lib


def gpu_key(tables, gpu: str | None) -> str | None:
    """The first key of a per-GPU table (`tables`: GPU key -> entries) that the GPU's name holds ("H200" in "NVIDIA
    H200"), else None: how the kernels' measured config tables are looked up by torch.cuda.get_device_name."""
    return next((key for key in tables if gpu and key in gpu), None)


def compile_parallel(builds: list[Callable[[], object]]) -> list[tuple[int, CompressError]]:
    """Run several library builds (calls of a module's `compile_variant`) at once, in parallel nvcc processes: one per
    core at most (nvcc is CPU-bound and each process takes hundreds of MB). Returns (index, error) of each build that
    failed, in order; the others are in the cache."""
    from concurrent.futures import ThreadPoolExecutor

    def one(build: Callable[[], object]) -> CompressError | None:
        try:
            build()
        except CompressError as e:
            return e
        return None

    with ThreadPoolExecutor(max(1, min(len(builds), os.cpu_count() or 1))) as pool:
        return [(i, e) for i, e in enumerate(pool.map(one, builds)) if e is not None]


def one_device(what: str, *tensors: torch.Tensor | None) -> torch.device:
    """The device all the given tensors are on (None entries skipped); a CompressError naming the devices otherwise."""
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise CompressError(f"{what}: tensors are on different devices {sorted(map(str, devices))}; move them to one device")
    return next(iter(devices))


def check_cuda_tensors(what: str, cpu_fix: str, *tensors: torch.Tensor | None) -> None:
    """The CUDA C++ launchers' device check: one device, and a CUDA one (they have no CPU interpreter); `cpu_fix`
    says what to use on a CPU."""
    dev = one_device(what, *tensors)
    if dev.type != "cuda":
        raise CompressError(f"{what}: needs CUDA tensors, got {dev}; {cpu_fix}")


class SplitKWorkspace:
    """Per-device scratch of the split-K kernels: (partials, int32 tile counters). The counters start at zero and
    the kernels leave them so; the partials are fp32 scratch, or (dtype=torch.int32, zeroed=True, kernels/i8_gemv.py)
    int32 sums that start at zero and that the kernel zeroes again. A workspace that is outgrown is replaced but kept
    alive, because a captured CUDA graph may still point at it."""

    def __init__(self, dtype: torch.dtype = torch.float32, zeroed: bool = False):
        self._dtype, self._zeroed = dtype, zeroed
        self._by_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._outgrown: list[torch.Tensor] = []

    def get(self, device: torch.device, elems: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
        ws, cnt = self._by_device.get(device, (None, None))
        if ws is None or ws.numel() < elems or cnt.numel() < tiles:
            if ws is not None:
                self._outgrown.extend((ws, cnt))
            alloc = torch.zeros if self._zeroed else torch.empty
            ws = alloc(max(elems, 1 << 20), dtype=self._dtype, device=device)
            cnt = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
            self._by_device[device] = (ws, cnt)
        return ws, cnt


class Libraries:
    """Kernel libraries loaded by key (variant, bits, arch...): each built, loaded and bound (`bind` sets the
    ctypes signatures) once per process. A failed build is remembered and its error raised again, so a missing
    nvcc costs one attempt, not one per call."""

    def __init__(self, bind: Callable[[ctypes.CDLL], None]):
        self._bind = bind
        self._lock = threading.Lock()
        self._libs: dict[Hashable, ctypes.CDLL] = {}
        self._failed: dict[Hashable, str] = {}

    def get(self, key: Hashable, build: Callable[[], Path]) -> ctypes.CDLL:
        with self._lock:
            if key in self._libs:
                return self._libs[key]
            if key in self._failed:
                raise CompressError(self._failed[key])
            try:
                so = ctypes.CDLL(str(build()))
            except (CompressError, OSError) as e:
                self._failed[key] = str(e)
                raise CompressError(str(e)) from None
            self._bind(so)
            self._libs[key] = so
            return so
