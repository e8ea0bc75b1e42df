"""Load and validate a recipe file before any model is loaded.

A recipe is llmcompressor's recipe schema, unchanged, so any llmcompressor recipe runs as it is:

    <name>_stage:
      <group>_modifiers:
        <ModifierName>: {<args>}

plus our own optional top-level `compress:` section (calibration defaults, export, validation gate)
and our own modifier `VPTQModifier` (run by `compress.vptq`, which llmcompressor lacks).
Validation is stricter than llmcompressor's (which silently ignores unknown keys): every unknown key,
modifier name or modifier argument is a one-line error with the file and line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from compress import compat  # noqa: F401 - quiets llmcompressor's logger before its import
from compress.errors import CompressError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
OUR_MODIFIERS = ("VPTQModifier",)


class CalibrationSection(BaseModel):
    """Calibration defaults; the CLI's --dataset/--num-samples/--seq-len override them."""

    model_config = ConfigDict(extra="forbid")
    dataset: str = "c4"
    num_samples: int = Field(128, ge=1)
    seq_len: int = Field(512, ge=2)
    text_column: str | None = None
    # Samples per forward pass. None (default): 1, so llmcompressor gets exactly what its own `oneshot`
    # builds and writes the same bytes; "auto": about 8192 tokens per pass (faster, other float rounding).
    batch_size: int | str | None = None
    # How samples are cut from the documents (calibration/sampling.py): "documents" = one sample per
    # document, its first seq_len tokens (measured better for GPTQ); "stream" = windows of exactly seq_len
    # tokens cut from the joined documents.
    window_layout: Literal["documents", "stream"] = "documents"

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, v):
        from calibration.sampling import parse_batch_size  # the rule --batch-size follows, in one place

        if v is None:
            return None  # "not set": the CLI's --batch-size, else 1
        try:
            return parse_batch_size(v, "batch_size", cli=False)
        except CompressError as e:
            raise ValueError(str(e)) from None


class ExportSection(BaseModel):
    """Checkpoint formats written. `pack` adds kernel-specific packings beside the standard one."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["compressed-tensors", "dense"] = "compressed-tensors"
    pack: list[str] = []


class ValidationSection(BaseModel):
    """The perplexity gate: compressed vs original on `eval_dataset`."""

    model_config = ConfigDict(extra="forbid")
    eval_dataset: str = "wikitext2"
    seq_len: int = Field(2048, ge=2)
    max_windows: int | None = Field(None, ge=1)
    max_ppl_increase: float | None = Field(None, ge=0)


class CompressSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    calibration: CalibrationSection = CalibrationSection()
    export: ExportSection = ExportSection()
    validation: ValidationSection = ValidationSection()


@dataclass
class ModifierSpec:
    stage: str
    group: str
    name: str
    args: dict[str, Any]
    line: int


@dataclass
class Recipe:
    """A validated recipe: llmcompressor stages (as a plain dict), our modifiers, our section."""

    path: Path
    name: str
    text: str
    modifiers: list[ModifierSpec]
    compress: CompressSection
    llmcompressor_dict: dict[str, Any] = field(default_factory=dict)

    @property
    def modifier_names(self) -> list[str]:
        return [m.name for m in self.modifiers]

    @property
    def vptq(self) -> ModifierSpec | None:
        return next((m for m in self.modifiers if m.name == "VPTQModifier"), None)

    def has(self, name: str) -> bool:
        return name in self.modifier_names

    @property
    def needs_calibration(self) -> bool:
        return any(m.name in CALIBRATION_MODIFIERS or m.name == "VPTQModifier" for m in self.modifiers)

    def llmcompressor_yaml(self) -> str:
        """The llmcompressor part as plain YAML (no python tags), loadable by llmcompressor and by us."""
        return yaml.safe_dump(self.llmcompressor_dict, sort_keys=False) if self.llmcompressor_dict else ""


# Modifiers that read calibration activations. Run on the data-free pipeline they silently produce
# garbage (measured: GPTQ/SmoothQuant with no data wrote a NaN model), so we refuse that combination.
CALIBRATION_MODIFIERS = {
    "GPTQModifier",
    "SmoothQuantModifier",
    "AWQModifier",
    "SparseGPTModifier",
    "WandaPruningModifier",
    "AutoRoundModifier",
    "LogarithmicEqualizationModifier",
}


def resolve_recipe_path(spec: str) -> Path:
    """A path to a YAML file, or the name of a bundled recipe (`w4a16_awq`)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    bundled = RECIPES_DIR / f"{spec}.yaml"
    if "/" not in spec and bundled.is_file():
        return bundled
    names = ", ".join(bundled_recipe_names())
    raise CompressError(f"recipe '{spec}' not found: give a YAML file path or a bundled recipe name ({names})")


def bundled_recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 1


def _mapping_items(node: yaml.Node, where: str, path: Path) -> list[tuple[str, yaml.Node, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        raise CompressError(f"{path}:{_line(node)}: {where} must be a mapping of names to settings")
    return [(k.value, k, v) for k, v in node.value]


def load_recipe(spec: str) -> Recipe:
    """Parse and validate the whole recipe; raises CompressError naming file:line and the fix."""
    path = resolve_recipe_path(spec)
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise CompressError(f"{path}:{line}: not valid YAML ({getattr(e, 'problem', e)}): fix the syntax") from None
    if root is None:
        raise CompressError(f"{path}:1: recipe is empty: add at least one '<name>_stage' or a 'compress' section")

    modifiers: list[ModifierSpec] = []
    compress_section = CompressSection()
    llm_dict: dict[str, Any] = {}
    for key, knode, vnode in _mapping_items(root, "the recipe", path):
        if key == "compress":
            compress_section = _validate_section(data["compress"] or {}, vnode, path)
        elif key == "args":
            llm_dict["args"] = data["args"]
        elif key.endswith("_stage"):
            stage_dict: dict[str, Any] = {}
            for gkey, gknode, gvnode in _mapping_items(vnode, f"stage '{key}'", path):
                if not gkey.endswith("_modifiers"):
                    raise CompressError(
                        f"{path}:{_line(gknode)}: '{gkey}' in stage '{key}' is not a modifier group: "
                        "name it '<something>_modifiers'"
                    )
                group: dict[str, Any] = {}
                for mname, mknode, mvnode in _mapping_items(gvnode, f"group '{gkey}'", path):
                    args = data[key][gkey][mname] or {}
                    if not isinstance(args, dict):
                        raise CompressError(f"{path}:{_line(mknode)}: arguments of {mname} must be a mapping")
                    modifiers.append(ModifierSpec(key, gkey, mname, args, _line(mknode)))
                    if mname not in OUR_MODIFIERS:
                        group[mname] = args
                if group:
                    stage_dict[gkey] = group
            if stage_dict:
                llm_dict[key] = stage_dict
        else:
            raise CompressError(
                f"{path}:{_line(knode)}: unknown top-level key '{key}': use '<name>_stage' for "
                "llmcompressor stages or 'compress' for calibration/export/validation settings"
            )
    recipe = Recipe(path, path.stem, text, modifiers, compress_section, llm_dict)
    _validate_modifiers(recipe)
    return recipe


def _validate_section(raw: dict, node: yaml.Node, path: Path) -> CompressSection:
    try:
        return CompressSection.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        line = _find_line(node, loc)
        raise CompressError(f"{path}:{line}: compress.{'.'.join(loc)}: {err['msg']}") from None


def _find_line(node: yaml.Node, loc: list[str]) -> int:
    """Line of the deepest key of `loc` present under `node`."""
    line = _line(node)
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next(((k, v) for k, v in node.value if k.value == part), None)
        if match is None:
            break
        line, node = _line(match[0]), match[1]
    return line


def _validate_modifiers(recipe: Recipe) -> None:
    """Instantiate every llmcompressor modifier (pydantic, extra='forbid') without a model."""
    from llmcompressor.modifiers import ModifierFactory

    if not ModifierFactory._loaded:
        ModifierFactory.refresh()
    known = set(ModifierFactory._registered_registry) | set(ModifierFactory._main_registry) | set(
        ModifierFactory._experimental_registry
    )
    for m in recipe.modifiers:
        where = f"{recipe.path}:{m.line}"
        if m.name == "VPTQModifier":
            _validate_vptq(m, where)
            continue
        if m.name not in known:
            raise CompressError(
                f"{where}: unknown modifier '{m.name}': use an llmcompressor modifier "
                f"(e.g. GPTQModifier, AWQModifier, SmoothQuantModifier, SparseGPTModifier, QuantizationModifier) or VPTQModifier"
            )
        try:
            ModifierFactory.create(m.name, allow_registered=True, allow_experimental=True, **m.args)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "arguments"
            raise CompressError(f"{where}: {m.name}.{loc}: {err['msg']}") from None
        except (TypeError, ValueError) as e:
            raise CompressError(f"{where}: {m.name}: {str(e).splitlines()[0]}") from None
    order = recipe.modifier_names
    if "AWQModifier" in order and not any(
        n in ("GPTQModifier", "QuantizationModifier") for n in order[order.index("AWQModifier") + 1 :]
    ):
        raise CompressError(
            f"{recipe.path}: AWQModifier needs a quantization modifier after it (QuantizationModifier or GPTQModifier)"
        )


def _validate_vptq(m: ModifierSpec, where: str) -> None:
    try:
        from compress.vptq import VPTQModifierConfig
    except ImportError:
        raise CompressError(f"{where}: VPTQModifier is not available in this build of compress") from None
    try:
        VPTQModifierConfig.model_validate(m.args)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        raise CompressError(f"{where}: VPTQModifier.{loc}: {err['msg']}") from None
