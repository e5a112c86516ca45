"""int8 models: post-training quantisation of the ONNX conversions with NNCF, made offline.

`engine.openvino_precision = "int8"` serves each model's int8 form, which `make convert-int8`
(`python -m serving.convert --int8`) makes once from the model's ONNX conversion and a
calibration set of rendered document pages (`serving.convert.calibration`): NNCF's `quantize` on the
OpenVINO model, saved as OpenVINO IR. Nothing quantises at request time or at server start.

Each int8 model lands in `<onnx_dir>/int8/<key>/` (`inference.xml`, `inference.bin`, the
source's `inference.yml`, and `provenance.json`, written last), where the key hashes the ONNX
model's bytes and the model kind's recipe (`RECIPES`): the same model and recipe quantise once.
The provenance names the source model's sha256, the NNCF and OpenVINO versions, the recipe and
the calibration set (its pages and how many inputs each model saw).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from models.convert import PROVENANCE_FILE, ModelConversionError
from models.packaged import file_sha256
from models.spec import CONFIG_FILE, ModelKind, ModelSpec

INT8_DIR = "int8"
"""The int8 models' folder inside `[engine] onnx_dir`."""
INT8_MODEL_FILE = "inference.xml"
"""The int8 model, OpenVINO IR (its weights beside it in `inference.bin`)."""
CONVERT_INT8_COMMAND = "make convert-int8 (python -m serving.convert --int8 --config <config>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Int8Recipe:
    """How NNCF quantises one kind of model (`nncf.quantize`'s arguments)."""

    preset: str = "performance"
    """`nncf.QuantizationPreset`: "performance" (symmetric activations) or "mixed"."""
    transformer: bool = False
    """`model_type=nncf.ModelType.TRANSFORMER` (keeps more of attention blocks in float)."""
    fast_bias_correction: bool = True
    """NNCF's fast bias correction, else the slower full one."""
    bias_correction: bool = True
    """NNCF's bias correction at all (`AdvancedQuantizationParameters.
    disable_bias_correction` where false)."""
    ignored_types: tuple[str, ...] = ()
    """OpenVINO operation types left in float."""
    ignored_names: tuple[str, ...] = ()
    """Operations left in float, by name (the ONNX conversion's node names, which OpenVINO
    keeps): the layers whose quantisation costs text (`loadtest.bench.int8_sensitivity`)."""
    subset_size: int = 300
    """Calibration inputs NNCF collects statistics on, at most."""

    def to_dict(self) -> dict[str, Any]:
        """The recipe as JSON (the cache key and the provenance). A recipe that names no
        operation leaves `ignored_names` out, and one with bias correction `bias_correction`, so
        its key is the one it had before those fields."""
        recipe = {**asdict(self), "ignored_types": list(self.ignored_types)}
        recipe["ignored_names"] = list(self.ignored_names)
        if not self.ignored_names:
            del recipe["ignored_names"]
        if self.bias_correction:
            del recipe["bias_correction"]
        return recipe


RECIPES: dict[ModelKind, Int8Recipe] = {
    "det": Int8Recipe(),
    # Asymmetric activations (the backbone's HSwish outputs are not centred on 0) and NNCF's
    # transformer rules for the SVTR neck: on the bench's 20 pages the recogniser alone at int8
    # read at CER 1.24% against f32's 1.10%, where NNCF's defaults read at 2.54%.
    "rec": Int8Recipe(preset="mixed", transformer=True),
    "cls": Int8Recipe(),
}
"""The recipe per model kind; docs/performance.md (int8) has the CER each variant measured."""

MODEL_RECIPES: dict[str, Int8Recipe] = {
    # The kind's recipe without NNCF's bias correction. With it (fast or full) the int8
    # recogniser merged words wherever its layers were: on this check set (synthetic pages and a
    # band of each language's maint-guide, detector at f32) f32 read 0.25% CER with 22 merged
    # words, the recipe 0.48% with 32, and no group of layers left in float (early, middle or
    # late backbone, neck, SVTR, head; NNCF's IgnoredScope or FakeQuantize bypassed) came back
    # under 31; without bias correction: 0.25% and 22 (2026-12-07, AMD EPYC with VNNI, 12
    # calibration pages; docs/performance.md, without bf16).
    "PP-OCRv6_small_rec": Int8Recipe(preset="mixed", transformer=True, bias_correction=False),
}
"""Recipes of their own, per model (by `Global.model_name`), in place of their kind's."""

FLOAT_LAYERS: dict[str, tuple[str, ...]] = {
    # The late backbone's pointwise and depthwise convs (its last four blocks; their
    # squeeze-excitation convs, Conv.22, 23, 26, 27, stay int8) and the neck's three convs after
    # the SVTR blocks. On the Xeon with AMX, the detector at int8 too, the bench's 8 pages: with
    # these in float Chinese read at ~1.3% CER (f32 1.43%) where the whole recogniser at int8
    # read at 2.69%, and merged 15 to 16 words (f32 16, int8 33). Found by `ocr-bench
    # int8-layers` (loadtest/bench/int8_sensitivity.py); docs/performance.md has the ranking.
    "PP-OCRv5_mobile_rec": (
        "Conv.24",
        "Conv.25",
        *(f"Conv.{i}" for i in range(28, 33)),
        "Conv.35",
        "Conv.36",
        "Conv.37",
    ),
}
"""Layers NNCF leaves in float, per model (`Int8Recipe.ignored_names`): node names are a
model's own, so they are kept per model, not per kind."""


def recipe_for(spec: ModelSpec) -> Int8Recipe:
    """The recipe `spec` is quantised with: its own (`MODEL_RECIPES`), else its kind's, with
    its own float layers."""
    recipe = MODEL_RECIPES.get(spec.model_name, RECIPES[spec.kind])
    return dataclasses.replace(recipe, ignored_names=FLOAT_LAYERS.get(spec.model_name, ()))


def import_nncf() -> ModuleType:
    """NNCF, or say which extra installs it.

    Raises:
        ModelConversionError: NNCF is not installed.
    """
    try:
        return importlib.import_module("nncf")
    except ImportError as err:
        raise ModelConversionError(
            "nncf is not installed: pip install -e '.[int8]' (pinned in pyproject.toml)"
        ) from err


def int8_key(onnx_sha256: str, recipe: Int8Recipe) -> str:
    """The int8 cache entry's name: a hash over the ONNX model's bytes' hash and the recipe."""
    text = json.dumps({"onnx": onnx_sha256, "recipe": recipe.to_dict()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def int8_entry(spec: ModelSpec, cache_dir: Path) -> Path:
    """The directory the int8 form of the ONNX model `spec` has (or will have)."""
    if spec.onnx_file is None:
        raise ModelConversionError(f"{spec.directory} holds no ONNX model to quantise")
    key = int8_key(file_sha256(spec.onnx_file), recipe_for(spec))
    return Path(cache_dir) / INT8_DIR / key


def find_int8(spec: ModelSpec, cache_dir: Path) -> Path | None:
    """The int8 model file of the ONNX model `spec`, complete in `cache_dir`, else None."""
    entry = int8_entry(spec, cache_dir)
    if not (entry / PROVENANCE_FILE).is_file():
        return None
    return entry / INT8_MODEL_FILE


def int8_model(spec: ModelSpec, cache_dir: Path) -> Path:
    """The int8 model file of the ONNX model `spec`, for serving it.

    Raises:
        ModelConversionError: it has not been quantised; the message names the command.
    """
    found = find_int8(spec, cache_dir)
    if found is None:
        raise ModelConversionError(
            f'openvino_precision = "int8": {spec.kind} model {spec.model_name} has no int8 form '
            f"in {(Path(cache_dir) / INT8_DIR).absolute()}; run {CONVERT_INT8_COMMAND}"
        )
    return found


def quantize(
    spec: ModelSpec,
    samples: Sequence[np.ndarray],
    cache_dir: Path,
    calibration: Mapping[str, Any],
) -> tuple[Path, bool]:
    """The int8 form of the ONNX model `spec`, quantising it into the cache unless it is there.

    Args:
        spec: An ONNX model (a conversion, `models.convert`).
        samples: Calibration inputs, each one NCHW float32 batch the model takes.
        cache_dir: `[engine] onnx_dir`.
        calibration: What the samples are (pages, their source), for the provenance.

    Returns:
        The int8 model file, and whether it was quantised now.

    Raises:
        ModelConversionError: NNCF is missing, there are no samples, or quantisation failed.
    """
    found = find_int8(spec, cache_dir)
    if found is not None:
        return found, False
    if spec.onnx_file is None:
        raise ModelConversionError(f"{spec.directory} holds no ONNX model to quantise")
    if not samples:
        raise ModelConversionError(f"no calibration inputs for the {spec.kind} model")
    nncf = import_nncf()
    ov = importlib.import_module("openvino")  # the `openvino` extra; NNCF's backend needs it too

    recipe = recipe_for(spec)
    entry = int8_entry(spec, cache_dir)
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        model = ov.Core().read_model(str(spec.onnx_file))
        options: dict[str, Any] = {
            "preset": nncf.QuantizationPreset(recipe.preset),
            "subset_size": recipe.subset_size,
            "fast_bias_correction": recipe.fast_bias_correction,
        }
        if recipe.transformer:
            options["model_type"] = nncf.ModelType.TRANSFORMER
        if not recipe.bias_correction:
            options["advanced_parameters"] = nncf.AdvancedQuantizationParameters(
                disable_bias_correction=True
            )
        if recipe.ignored_types or recipe.ignored_names:
            options["ignored_scope"] = nncf.IgnoredScope(
                names=list(recipe.ignored_names), types=list(recipe.ignored_types)
            )
        try:
            quantized = nncf.quantize(model, nncf.Dataset(list(samples)), **options)
        except Exception as err:  # NNCF raises its own and the engine's errors
            raise ModelConversionError(f"NNCF failed on {spec.onnx_file}: {err}") from err
        ov.save_model(quantized, str(work / INT8_MODEL_FILE), compress_to_fp16=False)
        shutil.copyfile(spec.directory / CONFIG_FILE, work / CONFIG_FILE)
        provenance = {
            "kind": spec.kind,
            "model_name": spec.model_name,
            "source_onnx": str(spec.onnx_file),
            "source_onnx_sha256": file_sha256(spec.onnx_file),
            "nncf": nncf.__version__,
            "openvino": ov.get_version(),
            "recipe": recipe.to_dict(),
            "calibration": {**calibration, "inputs": len(samples)},
            "quantized_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        (work / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", "utf-8")
        work.chmod(0o755)  # mkdtemp makes it private; the model is as readable as its source
        try:
            os.replace(work, entry)
        except OSError:
            if not (entry / PROVENANCE_FILE).is_file():  # not a concurrent quantisation's result
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return entry / INT8_MODEL_FILE, True
