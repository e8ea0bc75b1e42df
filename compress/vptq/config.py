"""VPTQ configuration as data: the fitting config `VPTQConfig`, the named presets, and the recipe-facing
`VPTQModifierConfig` (preset + overrides + targets/ignore), all strict pydantic (a typo fails at load).

Codebook scope (why presets share codebooks): bits per weight count codebooks. A 65536 x 8 fp16
codebook is 1 MiB = 8.4 Mbit; per layer it costs 0.05 bit/weight on a 4096 x 14336 layer but 25
bits/weight on SmolLM2's 576 x 576 q_proj. So the presets use one codebook per model (`scope="model"`),
fitted on the vectors of every targeted layer, each normalised per output channel (`norm="scale"`) so
vectors of different layers share a distribution. On SmolLM2-135M (106 M quantized weights) a model
codebook of 65536 x 8 costs 0.08 bit/weight, 4096 x 8 + 256 x 8 costs 0.005. `scope="layer"` is the
published VPTQ choice for large layers (Llama-3-8B and up); `scope="layer_type"` shares one codebook per
projection name (q_proj, down_proj, ...).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from compress.errors import CompressError

CONFIG_VERSION = 1


def scope_projection(key: str) -> str:
    """The projection name a shared-codebook scope key stands for ('mlp.up_proj.v4' -> 'up_proj'; 'model' ->
    'model'): the names res_centroids_by_type is keyed by."""
    return re.sub(r"\.v\d+$", "", key).rsplit(".", 1)[-1]


class VPTQConfig(BaseModel):
    """How to fit one VPTQ quantization (all layers of a model use the same settings).

    Args:
        vector_len: v, weights per vector; vectors run along out_features (N % v == 0, see `indivisible`).
        num_centroids: k, main codebook size; index bits ceil(log2(k)).
        num_res_centroids: residual codebook size; 0 disables the residual stage.
        scope: codebook sharing: "layer", "layer_type" (per projection name) or "model".
        norm: per-output-channel normalisation stored with the layer: "none", "scale" (RMS of the row,
            16 bits per row) or "scale_bias" (std and mean of the row, 32 bits per row).
        outlier_cols: input columns per layer (the most important by diag(H) * ||W[:, j]||^2) quantized with
            their own per-layer codebook of `num_outlier_centroids`; 0 disables.
        num_outlier_centroids: size of that per-layer outlier codebook.
        act_order: process columns by decreasing diag(H) (free: indices are stored per original column).
        block_size: columns per lazy error-feedback block (GPTQ).
        damp: diagonal dampening as a fraction of mean(diag(H)).
        kmeans_iters: Lloyd iterations for every codebook.
        kmeans_max_samples: vectors sampled (deterministically) for fitting a codebook; None = all.
        refine_iters: conjugate-gradient steps of centroid refinement on the layers' second-order loss
            after assignment (0 disables).
        res_beam: main-codebook candidates tried per vector when choosing the residual index (1 = greedy).
        kmeans_weight: importance of input column j in the k-means: "hessian_diag" H_jj (published VPTQ) or
            "obs" 1 / (H^-1)_jj, the cost GPTQ's error feedback cannot remove (Optimal Brain Surgeon).
        indivisible: layers with N % v != 0: "error" (stop, naming the layer) or "shrink" (use the largest
            divisor of N not above v for that layer, with its own codebooks).
        rescale_rows: after assignment, replace each row scale by its least-squares value for the chosen
            indices under H (norm != "none"; only where it lowers that row's loss).
        row_gain: what rescale_rows solves for: "ls" the least-squares scale (lowest loss of the row, but the
            reconstruction is shrunk: ||s q||_H^2 = ||w||_H^2 - loss), "norm" the scale that gives the row the
            float row's H-norm (unbiased output magnitude, loss higher by ~loss^2/4).
        res_centroids_by_type: residual codebook size per projection name (e.g. {"up_proj": 256, "q_proj": 32}),
            overriding num_res_centroids for the layers of that name (shared scopes only): moves index bits
            between projection types within one budget. 0 removes that type's residual.
        equalize: p of the input-column equalisation folded into the model before fitting (equalize.py);
            0 disables, 1 divides each input column's RMS out (to the nearest power of two).
        finetune_steps: Adam steps of end-to-end codebook/row-scale refinement by distillation from the
            float model on the calibration windows after the layer-wise fit (finetune.py); 0 disables.
        finetune_lr: its learning rate (codebook entries are O(1): rows are normalised; scales in log space).
        finetune_batch: calibration windows per step.
        finetune_holdout: share of the calibration windows held out to pick the best pass (never worse
            than the layer-wise fit on them).
        finetune_norms: the model's normalisation weights (RMSNorm/LayerNorm) learn with the codebooks and
            scales (stored as the checkpoint's ordinary tensors; they cost no bits of the quantized weights).
        own_codebooks: at most this many layers of shared scopes get main/residual codebooks of their own
            (sized as their scope's): those whose relative distortion under their scope's codebooks (weights and
            calibration diag(H), no evaluation data) is highest, if at least `own_codebook_ratio` x the scope's
            median; their scopes are refitted without them. Each costs (k + kr) x v x 16 bits. 0 disables.
        own_codebook_ratio: the minimum distortion ratio to the scope's median for own_codebooks.
        hdiag_floor: every live diag(H) entry is raised to at least this fraction of the layer's median one
            before fitting (k-means weights and error feedback; fit.floor_hdiag); 0 disables.
        seed: seeds every random choice; same seed, inputs and device -> same bytes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    vector_len: int = Field(8, ge=1, le=64)
    num_centroids: int = Field(65536, ge=2, le=2**20)
    num_res_centroids: int = Field(0, ge=0, le=2**20)
    scope: Literal["layer", "layer_type", "model"] = "model"
    norm: Literal["none", "scale", "scale_bias"] = "scale"
    outlier_cols: int = Field(0, ge=0)
    num_outlier_centroids: int = Field(4096, ge=2, le=2**20)
    act_order: bool = True
    block_size: int = Field(128, ge=1)
    damp: float = Field(0.01, ge=0.0)
    kmeans_iters: int = Field(30, ge=1)
    kmeans_max_samples: int | None = Field(None, ge=1)
    refine_iters: int = Field(0, ge=0)
    res_beam: int = Field(1, ge=1, le=64)
    kmeans_weight: Literal["hessian_diag", "obs"] = "hessian_diag"
    indivisible: Literal["error", "shrink"] = "error"
    rescale_rows: bool = True
    row_gain: Literal["ls", "norm"] = "ls"
    res_centroids_by_type: dict[str, int] = Field(default_factory=dict)
    equalize: float = Field(0.0, ge=0.0, le=2.0)
    finetune_steps: int = Field(0, ge=0)
    finetune_lr: float = Field(1e-3, gt=0.0)
    finetune_batch: int = Field(8, ge=1)
    finetune_holdout: float = Field(0.125, ge=0.0, lt=1.0)
    finetune_norms: bool = False
    own_codebooks: int = Field(0, ge=0)
    own_codebook_ratio: float = Field(1.5, ge=1.0)
    hdiag_floor: float = Field(0.0, ge=0.0, le=1.0)
    seed: int = 0

    @model_validator(mode="after")
    def _residual_size(self) -> VPTQConfig:
        if self.num_res_centroids == 1 or 1 in self.res_centroids_by_type.values():
            raise ValueError("num_res_centroids=1 is meaningless; use 0 (no residual) or at least 2")
        if any(v < 0 or v > 2**20 for v in self.res_centroids_by_type.values()):
            raise ValueError(f"res_centroids_by_type sizes must lie in 0..2^20, got {self.res_centroids_by_type}")
        if self.own_codebooks and self.scope == "layer":
            raise ValueError(
                "own_codebooks needs shared codebooks (scope layer_type or model); with scope layer every layer has its own"
            )
        if self.res_centroids_by_type and self.scope == "layer":
            raise ValueError("res_centroids_by_type needs shared codebooks (scope layer_type or model)")
        return self

    def res_centroids_for(self, key: str) -> int:
        """Residual codebook size of a shared-codebook scope key ('mlp.up_proj', 'model', 'mlp.up_proj.v4')."""
        return self.res_centroids_by_type.get(scope_projection(key), self.num_res_centroids)

    def nominal_bits(self) -> float:
        """Index bits per weight (codebooks, norms and padding excluded)."""
        from compress.vptq.format import index_bits

        bits = index_bits(self.num_centroids)
        if self.num_res_centroids:
            bits += index_bits(self.num_res_centroids)
        return bits / self.vector_len


# Presets: the seed-000 codebook sizes plus a ~2-bit, a <=2.5-bit and a ~3-bit point. Shared scopes because
# SmolLM2-size layers cannot carry their own codebooks (module docstring): "layer_type" where the 7
# codebooks are cheap (k4096/r256: +0.04 bit/weight on SmolLM2; it lowered the summed proxy loss of 15
# SmolLM2 layers by 8% vs one model codebook, 0.169 -> 0.155, mostly in block 0), "model" for the 1 MiB
# k65536 codebooks. kmeans_max_samples bounds the k-means cost (13 M vectors on SmolLM2) at 64-256 samples
# per centroid. res_beam=8: choosing the main index among its 8 nearest jointly with the residual lowered
# the summed proxy loss of 10 SmolLM2 layers by 12% (0.129 -> 0.113, CPU experiment).
# Common to all (session 2): equalize=1 (input columns' RMS folded into the producers; -9% / -6% summed
# proxy loss on SmolLM2 q_proj / down_proj of blocks 0, 15, 29 with shared k4096/r256 codebooks) and the
# least-squares row rescale (on by default; -0.6% there, -2.4% on the unit-test layer). End-to-end
# codebook/scale distillation (finetune_steps) is in the *_ft presets only: it needs the float model's logits
# (one more forward per step) and takes ~90 s on an H100 for SmolLM2 (session 7), far longer on a CPU.
# Bits on SmolLM2-135M (106.2 M quantized weights, 16-bit row scales = 0.023 bit/weight): k65536 2.10,
# k4096_r128 2.45 (measured), k4096_r256 2.56, k8192_r512 2.85, k65536_r256 3.10.
_COMMON = dict(vector_len=8, equalize=1.0)
PRESETS: dict[str, dict] = {
    "vptq_v8_k65536": dict(**_COMMON, num_centroids=65536, num_res_centroids=0, kmeans_max_samples=2**22, kmeans_iters=25),
    "vptq_v8_k4096_r128": dict(
        **_COMMON, num_centroids=4096, num_res_centroids=128, res_beam=8, scope="layer_type", kmeans_max_samples=2**20
    ),
    # r128 plus codebooks of their own for the 8 layers most distorted under their shared codebook (calibration
    # weights and diag(H) only; session 6: on SmolLM2 they include layers.11/28.mlp.down_proj, 2.9x/2.6x their
    # scope's median; 28.down's held-out error 0.39 -> 0.006 in the whole model). 2.489 bits on SmolLM2.
    "vptq_v8_k4096_r128_own8": dict(
        **_COMMON, num_centroids=4096, num_res_centroids=128, res_beam=8, scope="layer_type", kmeans_max_samples=2**20,
        own_codebooks=8, own_codebook_ratio=1.3,
    ),
    # own8 plus end-to-end distillation of codebooks, row scales and RMSNorm weights (session 7, H100, SmolLM2:
    # 52.26 -> 38.26 at the same 2.489 bits, GPTQ int3 46.00; held-out KL best after 98 of the 224 steps, and
    # the best pass is what is kept). About +90 s on the H100.
    "vptq_v8_k4096_r128_own8_ft": dict(
        **_COMMON, num_centroids=4096, num_res_centroids=128, res_beam=8, scope="layer_type", kmeans_max_samples=2**20,
        own_codebooks=8, own_codebook_ratio=1.3, finetune_steps=224, finetune_norms=True,
    ),
    # ~2 bits: the same with a 16-entry residual (4 index bits per 8 weights). Session 7, H100, SmolLM2: 2.098 bits,
    # PPL 90.66 layer-wise -> 53.59 distilled (GPTQ int2 g64 at 2.281 bits: 3404.65).
    "vptq_v8_k4096_r16_own8_ft": dict(
        **_COMMON, num_centroids=4096, num_res_centroids=16, res_beam=8, scope="layer_type", kmeans_max_samples=2**20,
        own_codebooks=8, own_codebook_ratio=1.3, finetune_steps=224, finetune_norms=True,
    ),
    "vptq_v8_k4096_r256": dict(
        **_COMMON, num_centroids=4096, num_res_centroids=256, res_beam=8, scope="layer_type", kmeans_max_samples=2**20
    ),
    "vptq_v8_k8192_r512": dict(
        **_COMMON, num_centroids=8192, num_res_centroids=512, res_beam=8, scope="layer_type", kmeans_max_samples=2**21
    ),
    "vptq_v8_k65536_r256": dict(
        **_COMMON, num_centroids=65536, num_res_centroids=256, res_beam=8, kmeans_max_samples=2**22, kmeans_iters=25
    ),
}


def preset(name: str, **overrides) -> VPTQConfig:
    """The named preset, with field overrides."""
    if name not in PRESETS:
        raise CompressError(f"unknown VPTQ preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    try:
        return VPTQConfig(**{**PRESETS[name], **overrides})
    except ValueError as e:  # pydantic.ValidationError is a ValueError
        raise CompressError(f"VPTQ preset {name!r} with overrides {overrides}: {_first_error(e)}") from None


def _first_error(e: Exception) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "config"
        return f"{loc}: {first.get('msg')} (got {first.get('input')!r})"
    return str(e).splitlines()[0]


class VPTQModifierConfig(BaseModel):
    """The recipe's `VPTQModifier:` arguments: a preset and/or explicit VPTQConfig fields, targets, ignore.

    Example recipe stage::

        vptq_stage:
          vptq_modifiers:
            VPTQModifier:
              preset: vptq_v8_k4096_r256
              seed: 1                 # any VPTQConfig field overrides the preset
              targets: [Linear]       # class names, module names, or "re:<regex>" on module names
              ignore: [lm_head]
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str | None = None
    targets: list[str] = Field(default_factory=lambda: ["Linear"])
    ignore: list[str] = Field(default_factory=lambda: ["lm_head"])
    # Optional overrides: every VPTQConfig field, None = take the preset's (or the default) value.
    vector_len: int | None = None
    num_centroids: int | None = None
    num_res_centroids: int | None = None
    scope: Literal["layer", "layer_type", "model"] | None = None
    norm: Literal["none", "scale", "scale_bias"] | None = None
    outlier_cols: int | None = None
    num_outlier_centroids: int | None = None
    act_order: bool | None = None
    block_size: int | None = None
    damp: float | None = None
    kmeans_iters: int | None = None
    kmeans_max_samples: int | None = None
    refine_iters: int | None = None
    res_beam: int | None = None
    kmeans_weight: Literal["hessian_diag", "obs"] | None = None
    indivisible: Literal["error", "shrink"] | None = None
    rescale_rows: bool | None = None
    row_gain: Literal["ls", "norm"] | None = None
    res_centroids_by_type: dict[str, int] | None = None
    equalize: float | None = None
    finetune_steps: int | None = None
    finetune_lr: float | None = None
    finetune_batch: int | None = None
    finetune_holdout: float | None = None
    finetune_norms: bool | None = None
    own_codebooks: int | None = None
    own_codebook_ratio: float | None = None
    hdiag_floor: float | None = None
    seed: int | None = None

    @model_validator(mode="after")
    def _check_preset(self) -> VPTQModifierConfig:
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown VPTQ preset {self.preset!r}; choose one of {', '.join(sorted(PRESETS))}")
        self.vptq()  # validate the merged config at load time, not at fit time
        return self

    def vptq(self) -> VPTQConfig:
        """The merged fitting config: preset (if any), then explicit fields."""
        overrides = {
            name: getattr(self, name)
            for name in VPTQConfig.model_fields
            if getattr(self, name, None) is not None
        }
        if self.preset is not None:
            return preset(self.preset, **overrides)
        try:
            return VPTQConfig(**overrides)
        except ValueError as e:
            raise CompressError(f"VPTQModifier arguments {overrides}: {_first_error(e)}") from None
