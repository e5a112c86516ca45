"""`ocr-serve` with the packaged textline classifier (rapidocr's ch_ppocr_mobile_v2.0_cls): lines
printed upside down on an upright page read right, through the device workers (whose inputs for
it are normalised as PaddleOCR 2.x's, `ModelSpec.pixel_norm`)."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import Server
from tests.images import encode_png, latin_lines

pytestmark = pytest.mark.e2e

FLIPPED = (0, 3)
"""The lines printed upside down: the short ones. The classifier reads a crop squeezed to 192 x 48
(PaddleOCR 2.x's input), and the 43-character line, squeezed 4x, it does not call upside down."""


@pytest.fixture
def cls_server(server: Server) -> Server:
    """The `default` profile serves the packaged textline classifier (tests/e2e/profiles.py)."""
    return server


def _page_with_lines_upside_down() -> tuple[np.ndarray, list[str]]:
    rendered = latin_lines()
    page = rendered.image.copy()
    rows = np.flatnonzero((page < 128).any(axis=(1, 2)))
    # Each line's rows: runs of inked rows, with a margin.
    breaks = np.flatnonzero(np.diff(rows) > 1)
    starts = [rows[0], *rows[breaks + 1]]
    ends = [*rows[breaks], rows[-1]]
    assert len(starts) == len(rendered.lines)
    for i in FLIPPED:
        top, bottom = starts[i] - 4, ends[i] + 5
        page[top:bottom] = np.rot90(page[top:bottom], 2)
    return page, list(rendered.lines)


def test_upside_down_lines_read_right(cls_server: Server) -> None:
    page, expected = _page_with_lines_upside_down()
    url = f"{cls_server.url}/v1/ocr"
    headers = {"content-type": "image/png"}
    on = httpx.post(f"{url}?textline_orientation=true", content=encode_png(page), headers=headers)
    assert on.status_code == 200, on.text
    assert [line["text"] for line in on.json()["pages"][0]["lines"]] == expected
    off = httpx.post(url, content=encode_png(page), headers=headers, timeout=120)
    read_off = [line["text"] for line in off.json()["pages"][0]["lines"]]
    assert all(read_off[i] != expected[i] for i in FLIPPED)  # the classifier is what reads them


def test_paddlex_reports_each_lines_angle(cls_server: Server) -> None:
    page, expected = _page_with_lines_upside_down()
    png = base64.b64encode(encode_png(page)).decode()
    body = {"file": png, "fileType": 1, "useTextlineOrientation": True}
    response = httpx.post(f"{cls_server.url}/ocr", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()["result"]["ocrResults"][0]["prunedResult"]
    assert result["model_settings"]["use_textline_orientation"] is True
    assert result["rec_texts"] == expected
    assert result["textline_orientation_angles"] == [int(i in FLIPPED) for i in range(4)]
