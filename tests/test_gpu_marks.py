"""`pytest -m gpu` (what the device calls run) selects every test that is skipped for want of a CUDA GPU, whether or
not its file marked it: tests/conftest.py adds the mark (sessions 38-39's device runs missed six files' tests)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import pytest
import torch

CUDA = torch.cuda.is_available()
bare = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the kernel is CUDA C++)")


@bare
def test_bare_skip_helper():
    pass


@pytest.mark.skipif(True, reason="needs two CUDA GPUs")
def test_two_gpus():
    pass


@pytest.mark.skipif(True, reason="Triton imported before its CPU interpreter")
def test_not_about_the_gpu():
    pass


def test_plain():
    pass
'''


def test_gpu_selects_the_tests_skipped_for_want_of_a_gpu(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "--collect-only", "-q", "-m", "gpu",
                          "-p", "no:cacheprovider", str(tmp_path / "test_probe.py")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    selected = sorted(line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line)
    assert selected == ["test_bare_skip_helper", "test_two_gpus"], out.stdout + out.stderr
