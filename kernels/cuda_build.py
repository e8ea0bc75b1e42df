"""Build a CUDA C++ source of kernels/csrc into a shared library with nvcc on first use, for ctypes.

The sources include no torch headers, so nvcc builds each in seconds; the library is cached under
~/.cache/compress/kernels (COMPRESS_KERNEL_CACHE), keyed by the source bytes, the GPU architecture and
the build flags, so an edited source or another GPU gets its own build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import torch

from compress.errors import CompressError


def nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return arch_of(major, minor)


def arch_of(major: int, minor: int) -> str:
    suffix = "a" if (major, minor) == (9, 0) else ""  # sm_90a: Hopper's own instruction set
    return f"{major}{minor}{suffix}"


def compile_library(src: Path, name: str, flags: list[str], arch_code: str, what: str, fallback: str) -> Path:
    """Path of the built library `<src stem>_<name>_<key>.so` (built now if not cached).

    `what` names the kernel and `fallback` says what runs instead, for the error messages.
    """
    exe = nvcc()
    if exe is None:
        raise CompressError(f"{what}: nvcc not found (set CUDA_HOME); {fallback}")
    key = hashlib.sha256(src.read_bytes() + " ".join([arch_code, *flags]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("COMPRESS_KERNEL_CACHE", Path.home() / ".cache" / "compress" / "kernels"))
    lib = cache / f"{src.stem}_{name}_{key}.so"
    if not lib.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = [exe, "-O3", "-std=c++17", "-diag-suppress=177", *flags, f"-gencode=arch=compute_{arch_code},code=sm_{arch_code}",
               "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp), str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise CompressError(f"{what}: nvcc failed ({' '.join(cmd)}): {res.stderr.strip()[-2000:]}")
        os.replace(tmp, lib)
    return lib


class SplitKWorkspace:
    """Per-device scratch of the split-K kernels: (fp32 partials, int32 tile counters). The counters start
    at zero and the kernels leave them so. A workspace that is outgrown is replaced but kept alive, because
    a captured CUDA graph may still point at it."""

    def __init__(self):
        self._by_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._outgrown: list[torch.Tensor] = []

    def get(self, device: torch.device, floats: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
        ws, cnt = self._by_device.get(device, (None, None))
        if ws is None or ws.numel() < floats or cnt.numel() < tiles:
            if ws is not None:
                self._outgrown.extend((ws, cnt))
            ws = torch.empty(max(floats, 1 << 20), dtype=torch.float32, device=device)
            cnt = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
            self._by_device[device] = (ws, cnt)
        return ws, cnt
