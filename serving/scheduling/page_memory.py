"""What one page costs the memory budget: every allocation that grows with it, in every process.

The budget (`memory_budget.MemoryBudget`) is the memory the whole process tree may use for
requests beyond its idle footprint, so a page is charged for all it makes the tree hold while it
is in flight, from sizes known before any pixel is decoded (`documents.PagePlan`: the page tree or
the image's headers, and the detector's input size, `det_input_size`):

| where | bytes | what |
| --- | --- | --- |
| CPU worker | 7 / page px (PDF) | pdfium's BGRx bitmap, its BGR copy |
| CPU worker | 10 / px as sent (image) | the decoder's buffers |
| shared memory, CPU | 3 + 3 / page px | the BGR page (kept for crops), a downscaled copy |
| shared memory, CPU | 15 / page px | line crops, the recogniser's float32 chunks (1) |
| CPU worker | 15 / detector px | the resized page, the float32 detector input |
| shared memory | 12 + 4 / detector px | the detector input, its probability map |
| CPU worker | 8 / detector px | the map read back, binarised, its contours |
| device worker | measured / detector px | batch copy, engine working memory, output (2) |

(1) for a page covered with lines at the recogniser's 48 px height: an estimate, since the lines
are found only after detection. (2) the engine's working memory for the input's shape.

The device worker's share is measured at warm-up on each engine (`serving.engine.warmup`): the
growth of the worker's peak resident memory while it runs the detector on one larger input, per
input pixel. Until a worker reports it, `DEFAULT_ENGINE_BYTES_PER_DET_PX` stands in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.det_preprocess import det_input_size
from pipelines.types import DetParams
from serving.decode.documents import PagePlan
from serving.decode.readers import FileKind, fit_side

DEFAULT_ENGINE_BYTES_PER_DET_PX = 200.0
"""A device worker's bytes per detector-input pixel when none was measured: OpenVINO's CPU
plugin measured about 170 on PP-OCRv5's mobile detector (4000 x 4000 input: +2.6 GiB)."""

ENGINE_RETAIN_SHARE = 0.25
"""Share of the memory budget kept for what the device workers' engines hold between pages: an
engine keeps the working memory of the largest input it has run (OpenVINO: ~190 B a detector
pixel), and allocating it anew for every page costs time (an A4 page: +46% CPU time on the
detector). Each worker keeps it up to its part of this share and releases it after a larger page
(`serving.workers.device_worker`); pages are charged against the rest (`pages_share_bytes`)."""


def pages_share_bytes(budget_bytes: int) -> int:
    """What pages may be charged, all together, of a budget of `budget_bytes`."""
    return budget_bytes - int(budget_bytes * ENGINE_RETAIN_SHARE)


def engine_retain_bytes(budget_bytes: int, det_workers: int) -> int:
    """What each of `det_workers` device workers that run the detector may keep between pages."""
    return int(budget_bytes * ENGINE_RETAIN_SHARE) // max(1, det_workers)


ENGINE_BYTES_KEY = "det_bytes_per_px"
"""Where a device worker's ready message reports its measured bytes per detector-input pixel."""

MIN_SCALED_SIDE_PX = 960
"""A page that does not fit the budget is scaled down, its longer side to no less than this (the
side PP-OCR's detectors were trained at); a page that does not fit even then is refused (413)."""

PDF_DECODE_BYTES_PER_PX = 7
IMAGE_DECODE_BYTES_PER_SENT_PX = 10
PAGE_BYTES_PER_PX = 3 + 3 + 15  # the BGR page (shared memory), a downscaled copy, crops and rec
DET_BYTES_PER_PX = 15 + 12 + 4 + 8  # CPU input, shared input, shared map, postprocessing


@dataclass(frozen=True, slots=True, kw_only=True)
class PageCosts:
    """Bytes a page holds in flight, all processes together (the table in the module doc)."""

    engine_bytes_per_det_px: float = DEFAULT_ENGINE_BYTES_PER_DET_PX
    """A device worker's working memory per detector-input pixel (measured at warm-up)."""

    @classmethod
    def measured(cls, infos: Iterable[Mapping[str, Any]]) -> PageCosts:
        """The costs with the largest `ENGINE_BYTES_KEY` the device workers reported when ready
        (any of them may run any page's detector); the default where none did."""
        measured = [float(info[ENGINE_BYTES_KEY]) for info in infos if ENGINE_BYTES_KEY in info]
        return cls(engine_bytes_per_det_px=max(measured)) if measured else cls()

    def describe(self) -> dict[str, float]:
        """For `/readyz`."""
        return {"engine_bytes_per_det_px": self.engine_bytes_per_det_px}

    def page_bytes(
        self, plan: PagePlan, kind: FileKind, det: DetParams, extra_per_px: int = 0
    ) -> int:
        """What the page costs, decoded at `plan.width` x `plan.height`, with `extra_per_px`
        more bytes a decoded pixel (the orientation classifier's upright copy)."""
        return self._bytes(plan.width, plan.height, plan, kind, det, extra_per_px)

    def fit(
        self,
        plan: PagePlan,
        kind: FileKind,
        det: DetParams,
        budget_bytes: int,
        extra_per_px: int = 0,
    ) -> int | None:
        """The longest side the page may be decoded at to cost at most `budget_bytes`: the side
        it decodes at when it fits, else a smaller one down to `MIN_SCALED_SIDE_PX`, else None.
        `extra_per_px` counts in (before, a page the classifier may turn was fitted without its
        copy, and then refused with 413 for the copy's few MB past the budget)."""
        longest = max(plan.width, plan.height)
        if self.page_bytes(plan, kind, det, extra_per_px) <= budget_bytes:
            return longest
        low, high = MIN_SCALED_SIDE_PX, longest - 1  # the answer, if any, is in [low, high]
        if low > high or self.at_side(low, plan, kind, det, extra_per_px) > budget_bytes:
            return None
        while low < high:
            mid = (low + high + 1) // 2
            if self.at_side(mid, plan, kind, det, extra_per_px) <= budget_bytes:
                low = mid
            else:
                high = mid - 1
        return low

    def at_side(
        self, side: int, plan: PagePlan, kind: FileKind, det: DetParams, extra_per_px: int = 0
    ) -> int:
        """What the page costs decoded with its longer side at most `side`."""
        width, height = fit_side(plan.full_width, plan.full_height, side)
        # A PDF renders at ceil(points x scale): one pixel more a side than the fit, at most.
        return self._bytes(width + 1, height + 1, plan, kind, det, extra_per_px)

    def det_bytes(self, width: int, height: int, det: DetParams) -> int:
        """Of a page decoded at `width` x `height`, what its detection holds (the rows with
        "detector px" in the module doc): given back once detection is done
        (`serving.service.ocr`), since the crops and the recogniser's inputs are charged apart."""
        det_h, det_w = det_input_size(height, width, det)
        return math.ceil((DET_BYTES_PER_PX + self.engine_bytes_per_det_px) * det_h * det_w)

    def _bytes(
        self,
        width: int,
        height: int,
        plan: PagePlan,
        kind: FileKind,
        det: DetParams,
        extra_per_px: int = 0,
    ) -> int:
        page_px = width * height
        if kind == "pdf":
            decode = PDF_DECODE_BYTES_PER_PX * page_px
        else:
            decode = IMAGE_DECODE_BYTES_PER_SENT_PX * plan.full_width * plan.full_height
        page = (PAGE_BYTES_PER_PX + extra_per_px) * page_px
        return decode + page + self.det_bytes(width, height, det)
