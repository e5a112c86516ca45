"""Where a line of text runs on its page: its baseline, as the text layers lay it (issue 48).

A detected line is a quad around its text. Its baseline, for a text layer, is a straight line at
the page's skew (`Page.skew`, one angle for the whole page, estimated from all its line boxes:
`pipelines.skew`) a fifth of the line's thickness above the quad's lower side, from the quad's
start to its end; the line's thickness (the quad's extent across that direction) is its font
size. One angle for every line of a page keeps its lines parallel, as printed, where each line's
own quad angle wobbles by a degree on short lines. A line far from the page's angle (text set
sideways, `pipelines.skew.MAX_DEG`) runs at its own.

The PDF text layer sets its glyphs on it (`serving.outputs.pdf_layer`), hOCR writes it as
`baseline` (and `textangle`), ALTO as `BASELINE` and `ROTATION`, and the OCRmyPDF plugin hands it
to OCRmyPDF's renderer.

`layout="centre"` is the other way measured (docs/outputs.md): the line level, through the quad's
centre, whatever the skew.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pipelines.skew import MAX_DEG, line_angles
from serving.outputs.document import Line

LineLayout = Literal["skew", "centre"]
DESCENT = 0.2
"""The baseline's height above the line's lower side, in font sizes (the font's descent)."""
DRIFT_SIZE = 0.5
"""A level line (`layout="centre"`) on an askew page grows by half its rise, at most this much
of its thickness. On the 8 askew pages of docs/outputs.md, the share of words whose print a
viewer's selection of them covers, and `pdftotext`'s default order (CER against ours): 0: 73%,
3.6%; 0.3: 82%, 3.6%; 0.5: 87%, 3.9%; 0.7: 89%, 5.7%, and words start to be lost (F1 0.966
against 0.967); 1.0: 92%, 7.4%, F1 0.954."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """A line's baseline: from `origin`, `length` long, at `angle_deg`; y down."""

    origin: tuple[float, float]
    angle_deg: float
    """Counter-clockwise from level (the page's skew, or the line's own angle)."""
    length: float
    size: float
    """The line's thickness across its baseline: its font size."""

    @property
    def direction(self) -> tuple[float, float]:
        """The unit vector along the baseline, y down."""
        turn = math.radians(self.angle_deg)
        return math.cos(turn), -math.sin(turn)

    def point(self, distance: float) -> tuple[float, float]:
        """The point `distance` along the baseline from its origin."""
        ux, uy = self.direction
        return self.origin[0] + distance * ux, self.origin[1] + distance * uy

    @property
    def end(self) -> tuple[float, float]:
        """Where the baseline ends."""
        return self.point(self.length)

    def span(self, x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
        """Where a word of the line whose upright box is (x0, y0, x1, y1) starts and ends along
        the baseline: its box's centre, and its length along the line (the box's width less the
        slant of the line's thickness across it)."""
        ux, uy = self.direction
        centre = ((x0 + x1) / 2 - self.origin[0]) * ux + ((y0 + y1) / 2 - self.origin[1]) * uy
        width = x1 - x0
        length = max(width - self.size * abs(uy), width / 2, 0.5) / max(abs(ux), 0.5)
        return centre - length / 2, centre + length / 2


def baseline(
    line: Line,
    skew_deg: float,
    scale: tuple[float, float] = (1.0, 1.0),
    layout: LineLayout = "skew",
) -> Baseline:
    """`line`'s baseline on a page whose skew is `skew_deg`, in the page's pixels times `scale`
    (x, y: points per pixel for a PDF)."""
    sx, sy = scale
    quad = np.asarray(line.poly, dtype=np.float64).reshape(4, 2) * (sx, sy)
    (own,), _ = line_angles(quad[np.newaxis])
    sideways = abs(own - _scaled(skew_deg, sx, sy)) > MAX_DEG
    angle = float(own) if sideways else _scaled(skew_deg, sx, sy)
    if layout == "centre" and not sideways:
        angle = 0.0
    turn = math.radians(angle)
    along = np.array([math.cos(turn), -math.sin(turn)])
    down = np.array([-along[1], along[0]])
    across, starts = quad @ down, quad @ along
    size = max(float(across.max() - across.min()), 0.5)
    if layout == "centre" and not sideways:
        across_skew = quad @ np.array(_normal(_scaled(skew_deg, sx, sy)))
        thickness = max(float(across_skew.max() - across_skew.min()), 0.5)
        # Half the line's rise across its length, up to `DRIFT_SIZE` of its thickness, makes the
        # em box taller: a viewer's selection of the line's end words reaches nearer their print.
        rise = float(starts.max() - starts.min()) * abs(math.sin(math.radians(skew_deg))) / 2
        size = thickness + min(rise, DRIFT_SIZE * thickness)
        base = float(across.mean()) + size / 2 - DESCENT * size
    else:
        base = float(across.max()) - DESCENT * size
    origin = float(starts.min()) * along + base * down
    return Baseline(
        origin=(float(origin[0]), float(origin[1])),
        angle_deg=angle,
        length=float(starts.max() - starts.min()),
        size=size,
    )


def _scaled(angle_deg: float, sx: float, sy: float) -> float:
    """An angle measured in pixels, in a space scaled by (sx, sy)."""
    turn = math.radians(angle_deg)
    return math.degrees(math.atan2(math.sin(turn) * sy, math.cos(turn) * sx))


def _normal(angle_deg: float) -> tuple[float, float]:
    turn = math.radians(angle_deg)
    return math.sin(turn), math.cos(turn)
