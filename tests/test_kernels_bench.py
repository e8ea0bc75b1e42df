"""`compress bench kernels` report: the seed-000 table format, target lines, and the no-GPU error."""

import shutil
from pathlib import Path

import pytest
import torch

from compress.bench.kernels import gpu_folder_name, linear_markdown, run_kernel_bench, targets, vptq_markdown
from compress.errors import CompressError
from kernels.cases import vptq_seed_rows

SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def fake_vptq_rows(ratio: float) -> list[dict]:
    return [{"count": i, "batch_size": 1, "in_features": k, "out_features": n, "main_centroids": c, "residual_centroids": r,
             "vptq_ms": 0.01 * ratio, "torch_ms": 0.01, "ratio": ratio}
            for i, (k, n, c, r) in enumerate(vptq_seed_rows(), start=1)]


def test_seed_rows_match_seed_000_order():
    rows = vptq_seed_rows()
    assert len(rows) == 120
    seed = next(SEED.glob("000_*.txt"), None) if SEED.exists() else None
    if seed is None:
        pytest.skip("seed tables not present next to this checkout")
    table = [ln for ln in seed.read_text().splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    parsed = [tuple(int(c) for c in ln.strip("|").split("|")[2:6]) for ln in table]
    assert parsed == rows


def test_vptq_markdown_has_seed_columns():
    md = vptq_markdown(fake_vptq_rows(0.3))
    header = md.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "count", "batch_size", "in_features", "out_features", "main_centroids", "residual_centroids", "vptq (ms)",
        "torch (ms)", "ratio"]
    assert md.count("\n| 1") >= 1 and "| 120" in md


def test_targets_pass_and_miss():
    w4 = [{"M": m, "speedup": s, "layer": "x"} for m, s in ((1, 3.2), (16, 2.0), (64, 0.9))]
    lines = targets({"vptq": fake_vptq_rows(0.3), "w4a16": w4})
    assert any("median ratio <= 0.35" in ln and "PASS" in ln for ln in lines)
    assert any("3.0x at M=1" in ln and "PASS" in ln for ln in lines)
    assert any("2.5x at M=16" in ln and "MISS" in ln for ln in lines)
    assert any("never slower" in ln and "MISS" in ln for ln in lines)


def test_linear_markdown_columns():
    row = {"layer": "8B q/o_proj", "N": 4096, "K": 4096, "M": 1, "kernel_ms": 0.01, "torch_ms": 0.03, "ratio": 1 / 3,
           "speedup": 3.0, "gbs": 900.0, "pct_copy_bw": 30.0, "tinygemm_ms": 0.02}
    md = linear_markdown([row], "tinygemm_ms", "tinygemm (ms)")
    assert "% copy BW" in md.splitlines()[0] and "3.00x" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_bench_without_gpu_is_a_one_line_error(tmp_path):
    with pytest.raises(CompressError, match="needs a CUDA GPU"):
        run_kernel_bench(["vptq"], tmp_path)


def test_report_header_names_the_timing_method():
    from compress.bench.kernel_timing import method_description
    from compress.bench.kernels import render_markdown

    env = {"device": "H100", "command": "compress bench kernels --timing rotate", "date": "today", "torch": "2", "triton": "3",
           "cuda": "13", "sms": 132, "copy_gbs": 3000.0, "timing": "rotate", "timing_text": method_description("rotate", "cpu")}
    md = render_markdown({"env": env, "results": {}, "targets": []})
    assert "Timing (`--timing rotate`): decode-shaped" in md and ">= 120 times back to back" in md


def test_w4a16_section_says_where_its_launch_configs_were_measured(monkeypatch):
    from compress.bench.kernels import render_markdown
    from kernels import w4a16_cuda

    monkeypatch.delenv("COMPRESS_W4A16_PICKS", raising=False)

    row = {"layer": "8B q/o_proj", "N": 4096, "K": 4096, "M": 1, "kernel_ms": 0.01, "torch_ms": 0.03, "ratio": 1 / 3,
           "speedup": 3.0, "gbs": 900.0, "pct_copy_bw": 30.0, "tinygemm_ms": 0.02}
    env = {"device": "NVIDIA H200", "command": "compress bench kernels --suite w4a16", "date": "today", "torch": "2",
           "triton": "3", "cuda": "13", "sms": 132, "copy_gbs": 4200.0,
           "w4a16_configs": w4a16_cuda.config_source("NVIDIA H200")}
    md = render_markdown({"env": env, "results": {"w4a16": [row]}, "targets": []})
    assert "The CUDA GEMV's launch configs: measured on the H200 (kernels/w4a16_cuda.py TUNED_BY_GPU['H200'])" in md


def test_bench_rejects_an_unknown_timing_method(tmp_path):
    with pytest.raises(CompressError, match="timing method"):
        run_kernel_bench(["w8a8"], tmp_path, timing="cold")


@pytest.mark.parametrize("name,folder", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                         ("NVIDIA A100-SXM4-80GB", "a100"), ("", "gpu")])
def test_default_results_folder_is_named_after_the_gpu(name, folder):
    """`compress bench kernels` without --output writes to bench/results/<folder>/kernels: an H200 run no longer lands
    in the H100's folder."""
    assert gpu_folder_name(name) == folder


def test_sparse24_table_prebuilds_the_runtime_builds(monkeypatch):
    """The 2:4 table compiles up front the int8 GEMV's build and every W8A16 GEMV build the runtime offers, and none of
    a kernel turned off."""
    from compress.bench.kernel_suites import sparse24_table_builds
    from kernels import i8_gemv, sp24_w16_gemv

    monkeypatch.delenv("COMPRESS_SP24_W16_VARIANTS", raising=False)
    builds = sparse24_table_builds()
    assert ("i8_gemv", i8_gemv.DEFAULT_VARIANT) in builds
    assert {v for mod, v in builds if mod == "sp24_w16_gemv"} == set(sp24_w16_gemv.RUNTIME_VARIANTS)
    monkeypatch.setenv("COMPRESS_SP24_W16_VARIANTS", "w8d3")
    assert [v for mod, v in sparse24_table_builds() if mod == "sp24_w16_gemv"] == ["w8d3"]
    monkeypatch.setenv("COMPRESS_SP24_W16", "0")
    monkeypatch.setenv("COMPRESS_I8_GEMV", "0")
    assert sparse24_table_builds() == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_prebuild_compiles_in_parallel_and_names_what_failed(tmp_path, monkeypatch, capsys):
    """`prebuild` compiles each (kernel module, variant) with nvcc and returns (and prints) the ones that failed, by
    name, instead of raising: here an architecture nvcc does not know."""
    from compress.bench.kernel_suites import prebuild

    monkeypatch.setenv("COMPRESS_KERNEL_CACHE", str(tmp_path))
    failed = prebuild("sparse24", [("sp24_w16_gemv", "w8d2"), ("i8_gemv", "w8b2s4")], "1a")
    assert [f.split(" (")[0] for f in failed] == ["sp24_w16_gemv w8d2", "i8_gemv w8b2s4"]
    assert "0 CUDA builds ready" in capsys.readouterr().out and not list(tmp_path.glob("*.so"))


def test_w4a16_table_prebuilds_every_build_its_rows_run():
    """The W4A16 table compiles, up front and in parallel, each CUDA GEMV build that a row's default config names (a
    fresh machine built them one at a time on first use), and nothing that is not a build."""
    from compress.bench.kernel_suites import QUICK_M, w4a16_table_builds
    from kernels import w4a16_cuda
    from kernels.cases import BENCH_M, LLAMA_SHAPES

    for ms in (QUICK_M, BENCH_M):
        names = w4a16_table_builds(ms)
        assert set(names) <= set(w4a16_cuda.VARIANTS) and w4a16_cuda.DEFAULT_VARIANT in names
        for _, n, k in LLAMA_SHAPES:
            for m in ms:
                if m <= w4a16_cuda.MAX_M:
                    assert w4a16_cuda.default_config(m, n, k)[0] in names
