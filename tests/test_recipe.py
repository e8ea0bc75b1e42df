"""Recipe loading: every bundled recipe validates; every mistake is one line naming file:line."""
from __future__ import annotations

import pytest
import yaml

from compress.errors import CompressError
from compress.recipe import bundled_recipe_names, load_recipe

SEED_RECIPES = [
    "original", "w8a8_smooth_gptq", "w8a8_smooth_ptq", "w8a8_sparse_smooth_gptq", "w8a16_awq",
    "w8a16_smooth_awq", "w8a16_sparse_awq", "w4a16_gptq", "w4a16_awq", "fp8_dynamic",
]


def test_every_seed_recipe_is_bundled_and_valid():
    names = bundled_recipe_names()
    for name in SEED_RECIPES:
        assert name in names
        load_recipe(name)


def _write(tmp_path, text):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("default_stage:\n  default_modifiers:\n    GPTQModifer: {scheme: W8A8}\n", 3, "unknown modifier 'GPTQModifer'"),
        ("default_stage:\n  default_modifiers:\n    GPTQModifier:\n      schem: W8A8\n", 3, "GPTQModifier.schem"),
        ("defaults:\n  x: 1\n", 1, "unknown top-level key 'defaults'"),
        ("default_stage:\n  mods:\n    GPTQModifier: {}\n", 2, "not a modifier group"),
        ("compress:\n  calibration:\n    num_sampels: 3\n", 3, "compress.calibration.num_sampels"),
        ("compress:\n  validation:\n    seq_len: 1\n", 3, "compress.validation.seq_len"),
        ("compress:\n  calibration:\n    batch_size: fast\n", 3, "batch_size 'fast': give a positive integer (1 reproduces oneshot) or 'auto'"),
        ("compress:\n  calibration:\n    batch_size: 0\n", 3, "batch_size 0"),
        ("a: [1,\n", 2, "not valid YAML"),
    ],
)
def test_recipe_errors_name_file_and_line(tmp_path, text, line, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(CompressError) as e:
        load_recipe(path)
    msg = str(e.value)
    assert f"{path}:{line}" in msg and fragment in msg and "\n" not in msg


def test_awq_without_quantization_is_refused(tmp_path):
    with pytest.raises(CompressError, match="AWQModifier needs a quantization modifier"):
        load_recipe(_write(tmp_path, "s_stage:\n  m_modifiers:\n    AWQModifier: {}\n"))


def test_unknown_recipe_name_lists_bundled():
    with pytest.raises(CompressError, match="w8a8_smooth_gptq"):
        load_recipe("w8a8_smooth_gtpq")


@pytest.mark.parametrize("name", ["w8a8_smooth_gptq", "w8a8_sparse_smooth_gptq", "w8a16_smooth_awq"])
def test_saved_recipe_round_trips(tmp_path, name):
    """What we write as recipe.yaml loads back with a safe loader, with llmcompressor, and with us."""
    from llmcompressor.recipe import Recipe as LlmRecipe

    recipe = load_recipe(name)
    text = recipe.llmcompressor_yaml()
    assert "!!python" not in text
    path = _write(tmp_path, text)
    assert yaml.safe_load(text) == recipe.llmcompressor_dict
    again = load_recipe(path)
    assert again.modifier_names == recipe.modifier_names
    assert [type(m).__name__ for m in LlmRecipe.create_instance(path).modifiers] == recipe.modifier_names


@pytest.mark.parametrize("scheme, int4", [("W4A16", True), ("W4A16_ASYM", True), ("W8A8", False), ("W8A16", False), ("FP8_DYNAMIC", False)])
def test_int4_detection_follows_llmcompressor_presets(tmp_path, scheme, int4):
    """`--pack w4a16` is refused for recipes without int4 weights; presets resolve through llmcompressor itself."""
    from compress.preflight import quantizes_int4

    text = f"s_stage:\n  m_modifiers:\n    QuantizationModifier: {{targets: [Linear], ignore: [lm_head], scheme: {scheme}}}\n"
    assert quantizes_int4(load_recipe(_write(tmp_path, text))) is int4
