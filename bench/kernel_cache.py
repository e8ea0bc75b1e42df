"""Build the CUDA C++ kernel libraries on a machine without a GPU, and carry them to the GPU machine.

Why: each device call here starts on a fresh GPU machine, and a fresh machine compiles every library on first use.
Session 27 built the W4A16 libraries on the CPU machine instead (the same nvcc 13.0, sm_90a), packed them as one xz
archive (24-31 libraries in 4-6 MB), carried it with the call, and unpacked it into the kernel cache there: every
library loaded, and no call spent device time in nvcc (bench/results/h200/kernels_s27/README.md). The libraries are
keyed by source, flags and architecture (kernels/cuda_build.py), so a stale archive is harmless: the runtime finds no
library under the current key and builds it.

    python3 bench/kernel_cache.py pack .kcache/kernels.tar.xz [--arch 90a] [--kernels w4a16,i8_gemv,sp24_w16_gemv]
    python3 bench/kernel_cache.py unpack .kcache/kernels.tar.xz     # on the GPU machine, into $COMPRESS_KERNEL_CACHE

`pack` compiles in parallel nvcc processes (one per core): every W4A16 build (kernels/w4a16_cuda.py VARIANTS and the
one-token CUDA-core and warp-specialized GEMVs, kernels/w4a16_cc.py and w4a16_ws.py, and the warp-specialized GEMM
for 2-16 tokens, w4a16_ws_gemm.py), every
int8 GEMV build, the W8A16 2:4 GEMV's runtime builds and (session 40) the VPTQ GEMV's default variant, its few-token
GEMM and its cluster kernel for the seed-000 index widths. `unpack` loads each library with ctypes and deletes the ones
that do not load (another system image), which the runtime then builds itself. Name the archive's folder in the device
call's `carry` and keep it git-ignored (`.git/info/exclude`).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

KERNELS = ("w4a16", "i8_gemv", "sp24_w16_gemv", "vptq")


def builds(kernels: list[str]) -> list[tuple[str, str]]:
    """The libraries to pack, as (kernels module, variant) pairs for compress.bench.kernel_suites.prebuild."""
    from kernels import i8_gemv, sp24_w16_gemv, vptq_cluster, vptq_cuda, w4a16_cuda

    return ([("w4a16_cuda", v) for v in w4a16_cuda.VARIANTS] + [("w4a16_cc", "cc"), ("w4a16_ws", "ws"), ("w4a16_ws_gemm", "wsm")] if "w4a16" in kernels else []) + \
        ([("i8_gemv", v) for v in i8_gemv.VARIANTS] if "i8_gemv" in kernels else []) + \
        ([("sp24_w16_gemv", v) for v in sp24_w16_gemv.RUNTIME_VARIANTS] if "sp24_w16_gemv" in kernels else []) + \
        ([("vptq_cuda", vptq_cuda.DEFAULT_VARIANT), ("vptq_gemm_cuda", "gemm")] +
         [("vptq_cluster", f"b{b}r{rb}") for b, rb in vptq_cluster.SEED_PAIRS] if "vptq" in kernels else [])


def pack(archive: Path, kernels: list[str], arch: str) -> int:
    from compress.bench.kernel_suites import prebuild

    with tempfile.TemporaryDirectory() as cache:
        os.environ["COMPRESS_KERNEL_CACHE"] = cache  # read by kernels.cuda_build at each build: only ours land here
        jobs = builds(kernels)
        t0 = time.time()
        failed = prebuild("kernel_cache", jobs, arch)
        if failed:
            print(f"error: {len(failed)} of {len(jobs)} builds failed, no archive written; check --arch {arch} (90a for "
                  f"the H100 / H200) and the nvcc on PATH; first: {failed[0]}", file=sys.stderr)
            return 1
        paths = sorted(Path(cache).glob("*.so"))
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_name(archive.name + ".tmp")
        with tarfile.open(tmp, "w:xz") as tar:
            for p in paths:
                tar.add(p, arcname=p.name)
        os.replace(tmp, archive)  # never a half-written archive where a good one is expected
    print(f"{len(paths)} libraries for sm_{arch} built in {time.time() - t0:.0f} s -> {archive} "
          f"({archive.stat().st_size / 2**20:.1f} MiB)")
    return 0


def unpack(archive: Path, cache: Path) -> int:
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile() and "/" not in m.name and m.name.endswith(".so")]
        tar.extractall(cache, members=[tar.getmember(n) for n in names], filter="data")
    dropped = []
    for name in names:
        try:
            ctypes.CDLL(str(cache / name))
        except OSError as e:
            dropped.append(f"{name} ({str(e)[:100]})")
            (cache / name).unlink()
    print(f"kernel cache {cache}: {len(names) - len(dropped)} carried libraries load"
          + (f"; dropped (the runtime builds them): {dropped}" if dropped else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pack", help="build the libraries here and write them into one xz archive")
    p.add_argument("archive", type=Path)
    p.add_argument("--arch", default="90a", help="CUDA architecture code, as kernels.cuda_build.arch gives it (90a: H100/H200)")
    p.add_argument("--kernels", default=",".join(KERNELS), help=f"comma list of {', '.join(KERNELS)}")
    u = sub.add_parser("unpack", help="unpack an archive into the kernel cache and drop what does not load")
    u.add_argument("archive", type=Path)
    args = ap.parse_args(argv)
    if args.verb == "pack":
        kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
        bad = sorted(set(kernels) - set(KERNELS))
        if bad:
            ap.error(f"--kernels names {bad}; choose from {', '.join(KERNELS)}")
        try:
            return pack(args.archive, kernels, args.arch)
        except OSError as e:  # the archive's folder not writable, the disk full
            print(f"error: cannot write {args.archive} ({e}); give a path in a writable folder", file=sys.stderr)
            return 1
    if not args.archive.is_file():
        ap.error(f"no archive at {args.archive}; pack one first (pack ARCHIVE) and carry its folder")
    from kernels.cuda_build import cache_dir

    try:
        return unpack(args.archive, cache_dir())
    except (tarfile.TarError, EOFError, OSError) as e:  # not an xz tar, cut short in transit, an unwritable cache
        why = " ".join(str(e).split())  # tarfile's "no format matched" error spans several lines
        print(f"error: cannot unpack {args.archive} into {cache_dir()} ({why}); pack it again, or set "
              "COMPRESS_KERNEL_CACHE to a writable folder", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
