"""The warm-up page every device worker runs before it reports ready."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from models.bundle import load_bundle
from serving.config import PipelineConfig
from serving.local_engine import ocr_page
from serving.request_options import ocr_options

WARMUP_TEXT = ("Warm-up page 2026", "OCR server 0123456789")


def warmup_image() -> np.ndarray:
    """A small white page with two printed lines (drawn with OpenCV, so no font files)."""
    image = np.full((240, 640, 3), 255, dtype=np.uint8)
    for i, line in enumerate(WARMUP_TEXT):
        cv2.putText(image, line, (20, 80 + 90 * i), cv2.FONT_HERSHEY_SIMPLEX, 1.3, (0, 0, 0), 2)
    return image


def warm_up_page(predictors: dict[str, Any], model_dirs: dict[str, str]) -> list[str]:
    """Run the warm-up page through the stages this worker has; returns the texts found.

    A worker limited to some stages warms up only those, on inputs shaped like a real page's.
    """
    bundle = load_bundle(**model_dirs)
    options = ocr_options(bundle, PipelineConfig(), use_textline_orientation="cls" in predictors)
    image = warmup_image()
    if "det" in predictors and "rec" in predictors:
        page = ocr_page(predictors, image, options, bundle.charset)
        return [line.text for line in page.lines]
    for predictor in predictors.values():
        predictor.warmup()
    return []
