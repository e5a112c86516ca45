"""Data passed between OCR stages: parameters, stage inputs and page results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from pipelines.page_orientation import PageOrientation
from pipelines.pixels import Pixels, normalize

LimitType = Literal["min", "max", "resize_long"]
"""How `limit_side_len` bounds a page: its short side at least (min), its long side at most
(max), or its long side exactly (resize_long)."""
LIMIT_TYPES: tuple[LimitType, ...] = get_args(LimitType)
"""Every `LimitType`, for runtime checks and API schemas."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DetParams:
    """Detection pre/post-processing settings (PaddleOCR 3.7 OCR pipeline defaults).

    These defaults are the server's too (`serving.config.DetPipelineConfig` reads them)."""

    limit_side_len: int = 64
    limit_type: LimitType = "min"
    max_side_limit: int = 4000
    thresh: float = 0.3
    box_thresh: float = 0.6
    unclip_ratio: float = 1.5
    max_candidates: int = 1000
    pad_step_px: int = 0
    """Bucketed batching (`[engine] batching`): the detector's input is zero-padded at the bottom
    and right up to a multiple of this in height and width, so pages of different sizes share a
    batch, and the map is cropped back; 0 (PaddleOCR's): each page at its own size."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecParams:
    """Recognition settings."""

    image_height: int = 48
    min_width: int = 320
    """`rec_image_shape[2]` from the model's inference.yml: crops are padded to at least this."""
    max_width: int = 3200
    batch_size: int = 6
    """Crops of one page per padded chunk, as PaddleOCR does (results depend on the padding)."""
    score_thresh: float = 0.0
    pad_widths_px: tuple[int, ...] = ()
    """Bucketed batching (`[engine] batching`), ascending: each crop is zero-padded to the first
    of these widths that holds it (wider ones keep their own), whatever its chunk, so chunks of
    one width from any page share a batch; () (PaddleOCR's): each chunk padded to its widest."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClsParams:
    """Textline-orientation classifier settings (from the classifier's inference.yml)."""

    image_height: int = 80
    image_width: int = 160
    batch_size: int = 6
    labels: tuple[str, ...] = ("0", "180")
    keep_ratio: bool = False
    """PaddleOCR 2.x's classifiers (`ClsResizeImg`, e.g. ch_ppocr_mobile_v2.0_cls): each crop
    resized to `image_height` keeping its aspect ratio (at most `image_width` wide), BGR, scaled to
    [-1, 1] and padded with 0.0 to `image_width`, as the recogniser's crops are; False: PP-LCNet's
    `ResizeImage` to `image_width` x `image_height`, RGB, ImageNet mean and std."""
    min_upside_down_score: float = 0.0
    """A crop is turned only when its upside-down class scores above this (PaddleOCR 2.x's
    `cls_thresh`, 0.9); 0.0: the top class decides (PaddleX's Topk)."""


@dataclass(frozen=True, slots=True)
class DetInput:
    """A page prepared for the detector."""

    pixels: np.ndarray
    """uint8, shape (3, H, W), BGR, H and W multiples of 32: the resized page."""
    src_h: int
    src_w: int
    ratio_h: float
    ratio_w: float

    @property
    def tensor(self) -> np.ndarray:
        """The detector's float32 input, (3, H, W) (`pipelines.pixels`)."""
        tensor: np.ndarray = normalize("det", self.pixels[np.newaxis])[0]
        return tensor


@dataclass(frozen=True, slots=True)
class RecChunk:
    """Crops of one page recognised together, padded to one width (PaddleOCR's chunking)."""

    indices: tuple[int, ...]
    """Positions of the chunk's crops in the page's crop list."""
    pixels: Pixels
    """uint8, shape (n, 3, image_height, width), each row's own width in `pixels.sizes`."""

    @property
    def tensor(self) -> np.ndarray:
        """The recogniser's float32 input, (n, 3, image_height, width) (`pipelines.pixels`)."""
        return self.pixels.normalized("rec")


@dataclass(frozen=True, slots=True)
class Word:
    """One word of a line (`pipelines.words`)."""

    text: str
    box: tuple[int, int, int, int]
    """x0, y0, x1, y1 in page pixels, x1 and y1 exclusive."""
    score: float
    """Its characters' mean probability."""


@dataclass(frozen=True, slots=True)
class TextLine:
    """One recognised line, in source-image pixel coordinates."""

    text: str
    score: float
    poly: np.ndarray
    """int16, shape (4, 2), points ordered TL, TR, BR, BL."""
    orientation: int = -1
    """Textline-orientation class id, or -1 when the classifier did not run."""
    words: tuple[Word, ...] = ()
    """The line's words with their boxes, from the recogniser's alignment (`pipelines.words`)."""


@dataclass(slots=True)
class PageResult:
    """Everything PaddleOCR's pipeline reports for one image or page."""

    width: int
    height: int
    dt_polys: list[np.ndarray] = field(default_factory=list)
    """Detected quads after sorting and dropping empty crops (PaddleOCR's `dt_polys`)."""
    lines: list[TextLine] = field(default_factory=list)
    """Lines whose score passed the threshold, in reading order (PaddleOCR's `rec_*`)."""
    orientations: list[int] = field(default_factory=list)
    """Per entry of dt_polys; empty when the classifier is off and nothing was detected."""
    page_orientation: PageOrientation | None = None
    """What the page-orientation classifier said of the page; None when it did not run. Boxes
    and sizes are those of the page as sent, whether or not it was read turned."""
    skew: float = 0.0
    """How far the page's lines are turned from level, degrees counter-clockwise
    (`pipelines.skew.estimate_skew` of its detected quads); 0.0 when none is long enough."""
