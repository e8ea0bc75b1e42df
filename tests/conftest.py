"""Shared fixtures: offline assets from ../shared/assets (never copied into the project)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# COMPRESS_TEST_ASSETS: the same layout elsewhere (the GPU machine gets a copy carried beside the tree)
ASSETS = Path(os.environ.get("COMPRESS_TEST_ASSETS") or ROOT.parent / "shared" / "assets")
STORIES = ASSETS / "models" / "stories260K"
CORPORA = ASSETS / "corpora"

os.environ.setdefault("COMPRESS_DATA_DIR", str(CORPORA))
# No hub here: fail fast instead of five retries with back-off (~25 s) per lookup.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def triton_interpreter_works() -> bool:
    """Whether the runtime's Triton kernels can run here: compiled on a GPU, else in Triton's CPU interpreter,
    which works only if `kernels` turned it on before anything imported triton."""
    import torch

    if torch.cuda.is_available():
        return True
    try:
        from compress.runtime.decode_kernels import gemv

        gemv(torch.ones(1, 16, dtype=torch.float16), torch.ones(16, 16, dtype=torch.float16), (16, 16, 4))
        return True
    except Exception:  # triton was imported before kernels turned its interpreter on
        return False


# A string condition: evaluated when the test runs, with the test module's globals (import both names).
needs_triton = pytest.mark.skipif("not triton_interpreter_works()", reason="Triton imported before its CPU interpreter")


@pytest.fixture(scope="session")
def stories_dir() -> Path:
    if not STORIES.is_dir():
        pytest.fail(f"offline asset missing: {STORIES} (the project expects ../shared/assets beside it; "
                    f"elsewhere set COMPRESS_TEST_ASSETS=/path/to/shared/assets)")
    return STORIES


@pytest.fixture(scope="session")
def stories_tokenizer(stories_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(stories_dir)


def w8a8_gemv_16_rows_on_cpu(monkeypatch) -> None:
    """On the CPU, plan the one-token W8A8 GEMV at 16 output rows a program. Triton's interpreter runs a grid one
    program at a time, and the plan for 132 SMs gives the tests' 64-512-row layers 2 rows a program (224 programs a
    call); 16 rows a program is the same kernel and math in 8x fewer programs (the prequantized-decode test took
    104-152 s on the 2-core CI machine before, nearly all of it there). The GPU keeps the real plan."""
    import torch

    if torch.cuda.is_available():
        return
    import kernels.w8a8 as kw8

    monkeypatch.setattr(kw8, "_gemv_rows", lambda n, device, cap=16: cap)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own baseline-perplexity cache."""
    monkeypatch.setenv("COMPRESS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def pytest_report_header(config):
    """Where the offline assets are read from, and a warning when they are not there (the tests that read them then
    fail with errors about the model folder or the corpus, not about the assets: session 40's device runs)."""
    if STORIES.is_dir() and CORPORA.is_dir():
        return f"compress test assets: {ASSETS}"
    return (f"compress test assets: {ASSETS} is MISSING: the tests that read stories260K or the corpora will fail; set "
            f"COMPRESS_TEST_ASSETS=/path/to/shared/assets")


def pytest_terminal_summary(terminalreporter):
    """The same warning at the end, where `pytest -q` (which hides the header) shows it beside the failures."""
    if not (STORIES.is_dir() and CORPORA.is_dir()):
        terminalreporter.write_line(pytest_report_header(None), yellow=True)


# ----------------------------------------------------------------------------- sm_90a builds in the background
def pytest_configure(config):
    config.addinivalue_line("markers", "sm90_build(name): builds tests.sm90_builds.BUILDS[name] with nvcc (the "
                                       "`sm90_library` fixture); conftest starts those builds in the background")
    _patch_triton_interpreter_once()


def _patch_triton_interpreter_once() -> None:
    """Triton's CPU interpreter (3.6) re-patches all of triton.language -- `inspect.getmembers` over three modules,
    a new closure per builtin -- at every call of a @triton.jit helper inside a kernel, though the kernel's launch has
    already patched it and restores it when the grid is done. Our kernels call helpers in their inner loops, so that
    re-patching was about a fifth of an interpreted test's time. Here a helper's call skips it when triton.language is
    already patched (the same builder, so the same semantics); a kernel launch still patches and restores. Nothing
    changes where the interpreter is off or its internals differ from what this expects."""
    import inspect

    import kernels  # noqa: F401  (first: decides interpreter-or-compiler before triton is imported)

    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import triton.language as tl
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang", None)
    if patch is None or getattr(patch, "patched_once", False) or not hasattr(tl.core, "is_builtin"):
        return

    class _Unchanged:
        def restore(self) -> None:
            pass

    def patch_lang(fn):
        langs = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]
        if langs and not any(tl.core.is_builtin(getattr(lang, "load", None)) for lang in langs):
            return _Unchanged()  # inside a launch: already patched
        return patch(fn)

    patch_lang.patched_once = True
    interpreter._patch_lang = patch_lang


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection
def pytest_collection_modifyitems(config, items):
    """A test skipped for want of a CUDA GPU is a GPU test: it gets the `gpu` mark, which the device calls select with
    `-m gpu`. Six files' skip helpers once lacked the mark, and `-m gpu` left their tests (and those of the files
    importing the helpers) out of sessions 38-39's device runs (found in session 40)."""
    for item in items:
        if any("CUDA" in m.kwargs.get("reason", "") or "GPU" in m.kwargs.get("reason", "")
               for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.gpu)


def pytest_collection_finish(session):
    """Start the collected tests' nvcc builds in a low-priority child (tests/sm90_builds.py says why)."""
    from kernels import cuda_build
    from tests import sm90_builds

    names = []
    for item in session.items:
        mark = item.get_closest_marker("sm90_build")
        if mark and mark.args[0] not in names:
            names.append(mark.args[0])
    if names and cuda_build.nvcc() is not None and not session.config.option.collectonly:
        session.config._sm90_background = sm90_builds.Background(names)


def pytest_sessionfinish(session):
    import shutil

    background = getattr(session.config, "_sm90_background", None)
    if background is not None:
        background.stop()
        shutil.rmtree(background.folder, ignore_errors=True)


@pytest.fixture
def sm90_library(request, monkeypatch, tmp_path):
    """The library of the test's `sm90_build` marker, from the session's background folder (built now, in the test's
    own folder, if no background build was started)."""
    from tests import sm90_builds

    background = getattr(request.config, "_sm90_background", None)
    monkeypatch.setenv(sm90_builds.ENV, str(background.folder if background else tmp_path))
    return sm90_builds.build(request.node.get_closest_marker("sm90_build").args[0])
