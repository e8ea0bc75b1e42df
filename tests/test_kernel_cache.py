"""bench/kernel_cache.py: CUDA libraries built on a machine without a GPU, packed into one archive, unpacked into the
kernel cache on the GPU machine with the ones that do not load dropped; bad input is a one-line error."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "kernel_cache.py"


def run(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(Path.home())}
    if cache is not None:
        env["COMPRESS_KERNEL_CACHE"] = str(cache)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT)


def test_unpack_keeps_what_loads_and_drops_what_does_not(tmp_path):
    """A real shared library (this Python's libc, found by ctypes) loads and stays; a file that is no library is
    deleted, so the runtime builds that one itself."""
    import ctypes.util

    libc = ctypes.util.find_library("c")
    src = next((p for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64")
                if (p := Path(d) / libc).exists()), None) if libc else None
    if src is None:
        pytest.skip("no libc file found to pack")
    (tmp_path / "good.so").write_bytes(src.read_bytes())
    (tmp_path / "bad.so").write_text("not a library")
    archive = tmp_path / "k.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tmp_path / "good.so", arcname="good.so")
        tar.add(tmp_path / "bad.so", arcname="bad.so")
    cache = tmp_path / "cache"
    res = run("unpack", str(archive), cache=cache)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["good.so"]
    assert "1 carried libraries load" in res.stdout and "bad.so" in res.stdout


def test_a_damaged_archive_is_a_one_line_error(tmp_path):
    archive = tmp_path / "k.tar.xz"
    archive.write_bytes(b"not an archive")
    res = run("unpack", str(archive), cache=tmp_path / "cache")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and f"cannot unpack {archive}" in res.stderr and "pack it again" in res.stderr


@pytest.mark.parametrize("args,message", [(("pack", "x.tar.xz", "--kernels", "w4a16,foo"), "--kernels names ['foo']"),
                                          (("unpack", "no/such.tar.xz"), "no archive at no/such.tar.xz")])
def test_bad_input_is_a_one_line_error(tmp_path, args, message):
    res = run(*args, cache=tmp_path)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_pack_builds_for_the_h100_and_writes_no_archive_when_a_build_fails(tmp_path, monkeypatch):
    """The W8A16 2:4 GEMV's runtime builds compiled for sm_90a, unpacked, are what the runtime finds in its cache (no
    new build); a build nvcc refuses (an architecture it does not know) leaves no archive behind."""
    from kernels import sp24_w16_gemv

    archive = tmp_path / "ok.tar.xz"
    res = run("pack", str(archive), "--kernels", "sp24_w16_gemv")
    assert res.returncode == 0, res.stderr
    cache = tmp_path / "cache"
    assert run("unpack", str(archive), cache=cache).returncode == 0
    carried = sorted(cache.iterdir())
    assert len(carried) == len(sp24_w16_gemv.RUNTIME_VARIANTS)
    monkeypatch.setenv("COMPRESS_KERNEL_CACHE", str(cache))
    found = sorted(sp24_w16_gemv.compile_variant("90a", v) for v in sp24_w16_gemv.RUNTIME_VARIANTS)
    assert found == carried and sorted(p for p in cache.iterdir() if p.suffix == ".so") == carried
    res = run("pack", str(tmp_path / "bad.tar.xz"), "--kernels", "sp24_w16_gemv", "--arch", "1a")
    assert res.returncode == 1 and "builds failed, no archive written" in res.stderr
    assert not list(tmp_path.glob("bad.tar.xz*"))
