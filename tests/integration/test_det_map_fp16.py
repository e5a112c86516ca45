"""The detector's map handed on as float16 (`pipelines.stages.DET`) gives the boxes float32 gives,
within a pixel.

The real detector (the default set's, PP-OCRv6 small, at the integration server's f32) runs in
process on the test pages and on the first pages of the real PDFs the bench reads; each map is
post-processed as float32 (what the model answered) and as the float16 a server moves between its
processes. Every contour's box score agrees within float16's rounding and falls on the same side of
`box_thresh`, and the quads are the same, each corner within one pixel: a map value next to the
0.3 threshold can round across it in float16 and move a contour's edge by a pixel. PP-OCRv5
mobile's boxes were identical on these pages; PP-OCRv6 small's are but one box of
shared-mime-info-spec's second page, one corner 1 px off (2026-12-07).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import cv2
import numpy as np
import pytest

from models.base import Predictor
from models.bundle import load_bundle
from pipelines import det_postprocess
from pipelines.page import prepare
from pipelines.stages import DET
from pipelines.types import DetParams
from serving.config import AppConfig
from serving.convert.pdf_pages import find_real_pdfs, render_pdf_pages
from serving.engine.choice import engine_choice
from tests import images

PAGES: dict[str, Callable[[], np.ndarray]] = {
    "latin": lambda: images.latin_lines().image,
    "chinese": lambda: images.chinese_lines().image,
    "rotated": lambda: images.rotated_line().image,
    "dense": lambda: images.dense_page().image,
    "dense-1": lambda: images.dense_page(1).image,
}


@pytest.fixture(scope="module")
def det(app_config: AppConfig) -> Iterator[Predictor]:
    models = app_config.models
    spec = load_bundle(models.det, models.rec).specs["det"]
    predictor = engine_choice(app_config, "cpu").predictor(spec)
    predictor.load()
    yield predictor
    predictor.close()


def _pages() -> Iterator[tuple[str, np.ndarray]]:
    for name, make in PAGES.items():
        yield name, make()
    for pdf in find_real_pdfs()[:2]:
        for index, page in enumerate(render_pdf_pages(pdf, dpi=150, count=2)):
            yield f"{pdf.stem}-{index}", page


def test_float16_map_gives_the_float32_boxes(det: Predictor) -> None:
    params = DetParams()
    checked = 0
    for name, image in _pages():
        step = prepare(image, params)
        raw = det.run(step.inputs[0])
        full = raw[0, 0].astype(np.float32)
        half = DET.output(raw)[0]
        assert half.dtype == np.float16
        size = (image.shape[0], image.shape[1])
        ours = det_postprocess.postprocess_det(half, size, params)
        theirs = det_postprocess.postprocess_det(full, size, params)
        assert len(ours) == len(theirs), name
        if len(ours):
            corners = np.abs(np.asarray(ours, np.int64) - np.asarray(theirs, np.int64))
            assert corners.max() <= 1, name
        # Each candidate's box score, as DB post-processing computes it, on both maps.
        bitmap = (full > np.float32(params.thresh)).astype(np.uint8) * 255
        contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        for contour in contours[: params.max_candidates]:
            points, _ = det_postprocess._get_mini_boxes(contour)
            exact = det_postprocess._box_score_fast(full, points)
            rounded = det_postprocess._box_score_fast(half, points)
            assert abs(exact - rounded) < 1e-3, name
            assert (exact < params.box_thresh) == (rounded < params.box_thresh), name
            checked += 1
    assert checked > 100  # the pages hold text
