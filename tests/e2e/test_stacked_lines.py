"""Reading order of a page of ~1,000 stacked lines against a real `ocr-serve` (issue 37, item 9).

Before, the XY-cut was recursive, one level per line cut off, and ran on the event loop: such a
page passed Python's recursion limit and `/v1/ocr?layout=true` answered 500. Now it is iterative
and bounded (`pipelines.layout`), and runs in a CPU worker (`Renderer.reading_orders`).
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import STACKED_HEIGHT_PX as HEIGHT

# A fake detector with a line every 20 rows; pages as tall as HEIGHT read as sent
# (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("stacked-lines")
WIDTH = 256
"""Multiples of 32 (HEIGHT too): the detector reads the page as sent, a line every 20 rows (1,000
lines)."""


def test_a_page_of_a_thousand_stacked_lines_gets_its_blocks(server: Server) -> None:
    png = images.encode_png(np.full((HEIGHT, WIDTH, 3), 255, dtype=np.uint8))
    answer = httpx.post(
        f"{server.url}/v1/ocr?layout=true",
        content=png,
        headers={"content-type": "image/png"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text[:500]
    (page,) = answer.json()["pages"]
    assert len(page["lines"]) >= 990
    order = [i for block in page["blocks"] for i in block["lines"]]
    assert sorted(order) == list(range(len(page["lines"])))  # every line in exactly one block
    tops = [page["lines"][i]["box"][0][1] for i in order]
    assert tops == sorted(tops)  # top to bottom
    text = httpx.post(
        f"{server.url}/v1/ocr?format=text",
        content=png,
        headers={"content-type": "image/png"},
        timeout=120,
    )
    assert text.status_code == 200, text.text[:500]
