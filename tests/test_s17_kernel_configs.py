"""COMPRESS_KERNEL_CONFIGS entries are checked when `kernels._common.tuned_config` returns them: a hand-written entry
that lacks a key its launcher reads, names a kind the family does not know, is not a JSON object or gives a tile /
warp / stage size that is not a positive int is a one-line CompressError (the file, the entry, the key, the fix), not a
KeyError deep in a launcher. Everything kernel_tune can write, the committed tuned files and the launchers' own
tables pass. CPU only."""

import json
from pathlib import Path

import pytest
import torch

from compress.errors import CompressError
from kernels import _common
from kernels._common import _CONFIG_KEYS, check_tuned_entry, tuned_config

ROOT = Path(__file__).resolve().parent.parent

# One valid entry per family and kind (what the launchers' tables or kernel_tune use), bucket "16".
VALID = {
    "w8a8": [
        {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4, "fused": False, "fit": 1, "pdl": 2048},
        {"kind": "gemv", "num_warps": 4, "pdl": 1},
        {"kind": "gemv"},
        {"kind": "tma", "BM": 64, "BN": 128, "BK": 128, "num_warps": 4, "num_stages": 4},
    ],
    "w8a8@4": [{"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "deep": 6, "qrecip": True}],
    "w4a16": [
        {"kind": "dequant"},
        {"kind": "gemv", "BN": 128, "num_warps": 8},
        {"kind": "tc", "BM": 16, "BN": 128, "NB": 2, "num_warps": 8, "num_stages": 3, "fill": 1.0},
        {"kind": "tcx", "BM": 16, "BN": 256, "num_warps": 8, "num_stages": 2, "waves": 2},
        {"kind": "mma", "BM": 16, "BN": 128, "num_warps": 4, "num_stages": 2},
    ],
    "sparse24-int8": [
        {"kind": "prmtw", "BN": 8, "BW": 32, "num_warps": 4, "waves": 1, "pdl": 1, "evict": "evict_first"},
        {"kind": "prmt", "BN": 16, "BW": 8, "num_warps": 4, "waves": 4, "pdl": 1024},
        {"kind": "gemv", "BN": 32, "BW": 8, "num_warps": 4},
        {"kind": "tc", "BM": 16, "BN": 64, "BW": 8, "num_warps": 4, "num_stages": 4, "fit": 2},
        {"kind": "mma", "BM": 16, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3},
    ],
    "sparse24-fp16": [
        {"kind": "prmtw", "BN": 4, "BQ": 64, "num_warps": 4, "waves": 1, "evict": "evict_first"},
        {"kind": "prmt", "BN": 16, "BW": 8, "num_warps": 4, "waves": 4},
        {"kind": "gemv", "BN": 32, "BW": 8, "num_warps": 4},
        {"kind": "tc", "BM": 16, "BN": 64, "BW": 8, "num_warps": 4, "num_stages": 4, "fit": 2},
        {"kind": "mma", "BM": 16, "BN": 64, "BK": 128, "num_warps": 4, "num_stages": 3},
    ],
    "sparse24-w8a16": [
        {"kind": "prmtw", "BN": 8, "BW": 32, "num_warps": 4, "waves": 1, "evict": "evict_first"},
        {"kind": "tc", "BM": 16, "BN": 64, "BW": 8, "num_warps": 4, "num_stages": 4, "fit": 2},
        {"kind": "dense"},
    ],
}
CASES = [(fam, i, cfg) for fam, cfgs in VALID.items() for i, cfg in enumerate(cfgs)]
IDS = [f"{fam}-{cfg.get('kind', 'gemm')}-{i}" for fam, i, cfg in CASES]


@pytest.fixture
def write_configs(tmp_path, monkeypatch):
    """write_configs(table) -> path: the table as COMPRESS_KERNEL_CONFIGS, the module's cache cleared."""

    def write(table) -> str:
        path = tmp_path / "tuned.json"
        path.write_text(json.dumps(table))
        monkeypatch.setenv("COMPRESS_KERNEL_CONFIGS", str(path))
        monkeypatch.setattr(_common, "_TUNED", {})
        return str(path)

    return write


def _raises(kernel: str, *words: str) -> str:
    with pytest.raises(CompressError) as info:
        tuned_config(kernel, 5)  # bucket "16"
    msg = str(info.value)
    assert "\n" not in msg and "kernel_tune --final --write" in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def test_the_schema_covers_every_family_tested():
    assert {fam.split("@")[0] for fam in VALID} == set(_CONFIG_KEYS)


@pytest.mark.parametrize("fam,i,cfg", CASES, ids=IDS)
def test_a_valid_entry_is_returned_unchanged(fam, i, cfg, write_configs):
    write_configs({fam: {"16": cfg}})
    assert tuned_config(fam, 5) == cfg
    assert tuned_config(fam, 5) == cfg  # the second lookup (the entry is checked once) returns the same
    assert tuned_config(fam, 1) is None  # bucket "1" has no entry: the launcher's table


@pytest.mark.parametrize("fam,i,cfg", CASES, ids=IDS)
def test_a_missing_required_key_names_the_key_and_the_file(fam, i, cfg, write_configs):
    family = fam.split("@")[0]
    required = _CONFIG_KEYS[family][cfg.get("kind")]
    for key in required:
        path = write_configs({fam: {"16": {k: v for k, v in cfg.items() if k != key}}})
        msg = _raises(fam, path, f'"{fam}" / "16"', f'lacks "{key}"')
        if "kind" in cfg:
            assert f'(kind "{cfg["kind"]}")' in msg


def test_the_brief_example_message(write_configs):
    path = write_configs({"sparse24-int8": {"1": {"kind": "prmtw"}}})
    with pytest.raises(CompressError) as info:
        tuned_config("sparse24-int8", 1)
    assert str(info.value) == (
        f'COMPRESS_KERNEL_CONFIGS={path}: entry "sparse24-int8" / "1" (kind "prmtw") lacks "BN"; '
        f"add it or rewrite the file with python -m compress.bench.kernel_tune --final --write {path}")


def test_fp16_and_int8_prmtw_need_different_keys(write_configs):
    write_configs({"sparse24-fp16": {"16": {"kind": "prmtw", "BN": 8, "BW": 32, "num_warps": 4}}})  # the int8 tiles
    _raises("sparse24-fp16", 'lacks "BQ"')
    write_configs({"sparse24-int8": {"16": {"kind": "prmtw", "BN": 4, "BQ": 64, "num_warps": 4}}})  # the fp16 tiles
    _raises("sparse24-int8", 'lacks "BW"')


@pytest.mark.parametrize("fam", list(VALID))
def test_a_wrong_kind_names_the_kind_and_the_file(fam, write_configs):
    path = write_configs({fam: {"16": dict(VALID[fam][0], kind="prmtx")}})
    _raises(fam, path, '"kind": "prmtx"', "does not know")
    write_configs({fam: {"16": dict(VALID[fam][0], kind=["tc"])}})  # not even a string
    _raises(fam, '"kind": ["tc"]')


@pytest.mark.parametrize("fam", ["w4a16", "sparse24-int8", "sparse24-fp16"])
def test_families_whose_launcher_reads_kind_require_it(fam, write_configs):
    cfg = {k: v for k, v in VALID[fam][-1].items() if k != "kind"}
    path = write_configs({fam: {"16": cfg}})
    _raises(fam, path, 'lacks "kind"', '"mma"')


@pytest.mark.parametrize("fam", list(VALID))
@pytest.mark.parametrize("entry", [[16, 64], "tc", 7, True], ids=["list", "str", "int", "bool"])
def test_an_entry_that_is_not_an_object_is_refused(fam, entry, write_configs):
    path = write_configs({fam: {"16": entry}})
    _raises(fam, path, f'"{fam}" / "16"', "not a JSON object")


@pytest.mark.parametrize("fam,i,cfg", CASES, ids=IDS)
@pytest.mark.parametrize("bad", [0, -16, 64.0, "64", True, None],
                         ids=["zero", "negative", "float", "str", "bool", "null"])
def test_a_tile_warp_or_stage_size_must_be_a_positive_int(fam, i, cfg, bad, write_configs):
    keys = [k for k in _common._CONFIG_INT_KEYS if k in cfg] or ["num_warps"]  # optional keys are checked too
    for key in keys:
        path = write_configs({fam: {"16": dict(cfg, **{key: bad})}})
        _raises(fam, path, f'"{key}": {json.dumps(bad)}', "positive integer")


def test_empty_or_absent_entries_and_other_families_pass_through(write_configs):
    write_configs({"w8a8": {"16": {}, "1": None}, "w4a16": {}, "someone-else": {"16": {"tile": [1, 2]}}})
    assert tuned_config("w8a8", 5) is None and tuned_config("w8a8", 1) is None and tuned_config("w4a16", 5) is None
    assert tuned_config("sparse24-fp16", 1) is None
    assert tuned_config("someone-else", 5) == {"tile": [1, 2]}  # not in the schema: not checked


def test_a_file_or_family_that_is_not_an_object_is_refused(write_configs):
    path = write_configs([{"w8a8": {}}])
    _raises("w8a8", path, "not a JSON object")
    path = write_configs({"w8a8": [{"BM": 16}]})
    _raises("w8a8", path, '"w8a8"', "not a JSON object")


def test_only_the_entry_looked_up_is_checked(write_configs):
    # A bad entry in another bucket does not stop a good one from serving (it fails when its own M comes).
    good = VALID["w8a8"][0]
    write_configs({"w8a8": {"16": good, "256": {"BM": 64}}})
    assert tuned_config("w8a8", 5) == good
    with pytest.raises(CompressError, match='"w8a8" / "256".*lacks "BN"'):
        tuned_config("w8a8", 300)


def test_w8a8_linear_with_a_bad_entry_is_a_compress_error(write_configs, monkeypatch):
    """End to end on the CPU (Triton's interpreter): the w8a8 GEMM entry without "BK"/"BN" stops before any launch."""
    from kernels.cases import make_w8a8
    from kernels.w8a8 import _launch, w8a8_linear

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # `check_device` lets CPU tensors through; nothing here compiles
    wq, ws = make_w8a8(24, 64, "cpu")
    x = torch.randn(5, 64).half()
    bad = {"BM": 16, "BK": 64, "num_warps": 4}
    with pytest.raises(KeyError):  # what a bad config did before: the raw KeyError from the launcher
        _launch(x, wq, ws, bad)
    path = write_configs({"w8a8": {"16": bad}})
    with pytest.raises(CompressError) as info:
        w8a8_linear(x, wq, ws)
    assert path in str(info.value) and 'lacks "BN"' in str(info.value)
    write_configs({"w8a8@5": {"16": {"BM": 16, "BN": 32, "num_warps": 4}}})  # an exact-M entry lacking "BK"
    with pytest.raises(CompressError, match='"w8a8@5" / "16" lacks "BK"'):
        w8a8_linear(x, wq, ws)


# ------------------------------------------------------------------------ what kernel_tune and the tables produce
def _kernel_tune_candidates() -> list[tuple[str, dict]]:
    from compress.bench import kernel_tune as kt

    out = []
    saved = kt.FINAL
    try:
        for final in (False, True):
            kt.FINAL = final
            for m in (1, 2, 4, 8, 16, 17, 32, 64, 65, 256, 1024):
                out += [("w4a16", c) for c in kt._w4a16_configs(m)]
                out += [("w8a8", c) for c in kt._w8a8_configs(m)]
                out += [("sparse24-fp16", c) for c in kt._sp_configs("f")(m)]
                out += [("sparse24-int8", c) for c in kt._sp_configs("i")(m)]
            out += [("sparse24-w8a16", c) for c in kt._w16_configs(1)]  # session 18
    finally:
        kt.FINAL = saved
    return out


def test_every_kernel_tune_candidate_passes():
    cands = _kernel_tune_candidates()
    assert len(cands) > 100 and {f for f, _ in cands} == set(_CONFIG_KEYS)
    for fam, cfg in cands:
        check_tuned_entry(fam, "16", json.loads(json.dumps(cfg)), "tuned.json")  # as written to and read from the file


def test_the_committed_tuned_files_pass():
    files = sorted((ROOT / "bench" / "results").rglob("tuned*.json"))
    assert files
    for f in files:
        for kernel, by_bucket in json.loads(f.read_text()).items():
            for bucket, cfg in by_bucket.items():
                check_tuned_entry(kernel, bucket, cfg, str(f))


def test_the_launchers_own_tables_pass():
    # A user copying a built-in config into the file gets no error.
    from kernels import sparse24, w4a16, w8a8

    shapes = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (1024, 8192)]
    for m in (1, 2, 3, 4, 8, 16, 17, 32, 33, 64, 65, 256, 1024):
        check_tuned_entry("w8a8", "x", w8a8._config_builtin(m))
        check_tuned_entry("w8a8", "x", w8a8._config_pointer_gemm(m))
        for n, k in shapes:
            check_tuned_entry("w8a8", "x", w8a8._config_builtin(m, n, k, 132))
            check_tuned_entry("w8a8", "x", w8a8._gemm_fallback(m, n, k, torch.device("cpu")))
            check_tuned_entry("w4a16", "x", w4a16._tile_config(m, n, k))
            for int8 in (False, True):
                fam = "sparse24-int8" if int8 else "sparse24-fp16"
                check_tuned_entry(fam, "x", sparse24._config(m, int8, n, k))
                for cfg in sparse24.alternative_configs(m, int8).values():
                    check_tuned_entry(fam, "x", cfg)
                check_tuned_entry(fam, "x", sparse24._mma_config(m))
    for m in (1, 2, 16, 17, 64, 65, 256):
        for n, k in shapes:
            check_tuned_entry("sparse24-w8a16", "x", sparse24._config_w8a16(m, n, k))
    for by in w4a16.SHAPE_TUNED.values():
        for cfg in by.values():
            check_tuned_entry("w4a16", "x", cfg)


def test_kernel_tune_writes_entries_the_launchers_read(write_configs):
    # kernel_tune --final sweeps W8A8 at 2 and 8 tokens: their winners must land where `tuned_config` looks
    from compress.bench.kernel_tune import best_entry

    assert best_entry("w4a16", 16) == ("w4a16", "16") and best_entry("w8a8", 256) == ("w8a8", "256")
    assert best_entry("w8a8", 2) == ("w8a8@2", "16") and best_entry("w8a8", 8) == ("w8a8@8", "16")
    cfg = {"BM": 16, "BN": 64, "BK": 256, "num_warps": 4, "num_stages": 4}
    table: dict = {}
    for m, c in ((8, dict(cfg, deep=6)), (16, cfg)):
        kernel, bucket = best_entry("w8a8", m)
        table.setdefault(kernel, {})[bucket] = c
    write_configs(table)
    from kernels.w8a8 import _config

    assert _config(8) == dict(cfg, deep=6)  # the exact-M winner
    assert _config(4) == cfg  # the bucket's


def test_a_fp16_24_entry_does_not_reach_the_w8a16_layers(write_configs):
    # "sparse24-fp16" tunes fp16 values (e.g. the quad GEMV with BQ); W8A16 from 2 tokens uses the built-in tiles
    from kernels import sparse24

    write_configs({"sparse24-fp16": {"16": {"kind": "prmtw", "BN": 4, "BQ": 64, "num_warps": 4}}})
    assert sparse24._config(4)["kind"] == "prmtw"  # the fp16 layers take the entry
    assert sparse24._config_w8a16(4, 4096, 4096) == sparse24._config_builtin(4)
    assert sparse24._config_w8a16(4, 4096, 4096)["kind"] == "tc"
