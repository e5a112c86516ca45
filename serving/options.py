"""The OCR options a request may set, each under one name from HTTP to the pipeline.

A request option is named as the native API names it (`det_thresh`: `/v1/ocr`'s query parameter,
a job's option, `ocr-batch -o`), and keeps that name until `serving.request_options` builds the
pipeline's parameters from it (`DetParams.thresh`); PaddleX's `/ocr` maps its own field names
(`textDetThresh`) onto these when it parses a request. Each option's kind, range or choices and
its `[pipeline]` default live here, read by the config (whose defaults must lie in the same
ranges), the HTTP layer (its OpenAPI document) and the jobs (their options are checked when
submitted). Nothing here imports the rest of the server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from pipelines.types import LIMIT_TYPES
from serving.errors import ValidationFailed

OrientationMode = Literal["auto", "off"]
ORIENTATION_MODES: tuple[OrientationMode, ...] = ("auto", "off")


class Option(NamedTuple):
    """One OCR option of the native API."""

    kind: type
    description: str
    """For the OpenAPI document."""
    default: str = ""
    """The `[pipeline]` key its default comes from (`det.thresh`: `[pipeline.det] thresh`),
    which is also where the built options hold it (`OcrOptions.det.thresh`); "" = none (the
    model set's choice: `lang`, `model`)."""
    bounds: tuple[float, float] | None = None
    """The closed range a number must be in (the default too); NaN and infinities never are."""
    choices: tuple[str, ...] = ()
    """The values a string option may take; () = any."""


OPTIONS: dict[str, Option] = {
    "det_limit_side_len": Option(
        int, "Detection resize limit", "det.limit_side_len", bounds=(1, 100_000)
    ),
    "det_limit_type": Option(str, "", "det.limit_type", choices=LIMIT_TYPES),
    "det_thresh": Option(float, "Pixel threshold of the detector", "det.thresh", bounds=(0.0, 1.0)),
    "det_box_thresh": Option(float, "Box score threshold", "det.box_thresh", bounds=(0.0, 1.0)),
    "det_unclip_ratio": Option(float, "Box expansion", "det.unclip_ratio", bounds=(0.0, 4.0)),
    "score_thresh": Option(
        float, "Drop lines scoring below this", "rec.score_thresh", bounds=(0.0, 1.0)
    ),
    "textline_orientation": Option(
        bool, "Run the orientation classifier", "use_textline_orientation"
    ),
    "orientation": Option(
        str,
        "Page orientation: auto (a page found turned 90, 180 or 270 degrees is read upright, its "
        "boxes in the page as sent) or off",
        "orientation",
        choices=ORIENTATION_MODES,
    ),
    "lang": Option(
        str, "Language (PaddleOCR's codes: ch, en, fr, japan, ...): the model set reading it"
    ),
    "model": Option(str, "Model set by name (GET /v1/models)"),
}
"""The native API's OCR options: `/v1/ocr`'s query parameters, a job's options, `ocr-batch -o`,
the keyword arguments of `serving.request_options.ocr_options`.

The ranges are where the pipeline works: past them the CPU worker fails (a negative unclip ratio:
cv2.error; a side limit past float range: OverflowError), runs out of memory (unclip_ratio=1e14
offsets each box by ~1e15 px with round joins), or answers NaN, which is not JSON. The thresholds
are probabilities (the detector's map, a box's mean, a line's score): `det_thresh=2` read nothing,
without a word.

The unclip ratio stops at 4 (it was 100; issue 49, item 6). PaddleOCR documents any value above 0
and ships 1.5 (its PP-OCRv3 to v5 detectors, PaddleX's pipeline), 1.6 (its lite demo) and 2.0
(PaddleOCR 2.x's DB configs); tuned pipelines go to about 2.5. A box grows by the ratio times its
kernel's area over its perimeter on every side (`pipelines.det_postprocess`), about half the
kernel's height per unit: at 4 a line's box takes in the lines above and below it, which reads
nothing better (the recogniser reads one line), while each box's pixels, and the crops made of
them all at once, grow with the square of the ratio: at 100, with `det_box_thresh=0`, each of up
to 1000 boxes grew to near the page's size."""


def in_range(name: str, value: Any) -> bool:
    """Whether `value` is a finite number within option `name`'s bounds."""
    bounds = OPTIONS[name].bounds
    if bounds is None:
        raise ValueError(f"option {name} has no range")
    low, high = bounds
    try:
        return math.isfinite(value) and low <= value <= high
    except OverflowError:  # an int past float range
        return False


def range_text(name: str) -> str:
    """Option `name`'s bounds in words, for error messages."""
    low, high = OPTIONS[name].bounds or (-math.inf, math.inf)
    return "a finite number" if math.isinf(low) else f"a number in [{low}, {high}]"


def choices_text(choices: Sequence[object]) -> str:
    """Choices as "a, b or c", for error messages."""
    names = [str(choice) for choice in choices]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def check_choice(name: str, value: Any) -> Any:
    """`value` when the string option `name` may take it.

    Raises:
        ValidationFailed: naming the choices.
    """
    choices = OPTIONS[name].choices
    if value not in choices:
        raise ValidationFailed(f"{name} must be {choices_text(choices)}")
    return value


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse numbers outside their option's bounds; None means "not given".

    Raises:
        ValidationFailed: naming the option, its range and the value.
    """
    for name, option in OPTIONS.items():
        value = overrides.get(name)
        if value is not None and option.bounds is not None and not in_range(name, value):
            raise ValidationFailed(f"{name} must be {range_text(name)}, got {value!r:.40}")
