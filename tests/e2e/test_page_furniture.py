"""Page furniture in reading order on a real page (issue 39, item 7): Debian's Shared MIME-info
spec, page 2, has its running header at the top right, above the left-aligned heading, and its
page number at the bottom right; text, hOCR and ALTO read the header first and the number last."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from loadtest.accuracy import cer
from serving.convert import pdf_pages as pages
from tests import images
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

SPEC_PDF = Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")
"""Package shared-mime-info (scripts/system-deps.sh)."""

HEADER, HEADING, FOOTER = (
    "Shared MIME-info Database",
    "1.3. Language used in this specification",
    "2",
)


@pytest.fixture(scope="module")
def page() -> bytes:
    """Page 2 as PNG at 150 dpi."""
    if not SPEC_PDF.is_file():
        pytest.fail(f"{SPEC_PDF} missing: run scripts/system-deps.sh")
    (image,) = pages.render_pdf_pages(SPEC_PDF, dpi=150, first=1, count=1)
    return images.encode_png(image)


def _lines(server: Server, page: bytes, accept: str) -> list[str]:
    answer = httpx.post(
        f"{server.url}/v1/ocr",
        content=page,
        headers={"Content-Type": "image/png", "Accept": accept},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    if accept == "text/plain":
        return [line for line in answer.text.splitlines() if line.strip()]
    root = ET.fromstring(answer.content)
    if accept == "text/vnd.hocr+html":
        spans = root.iter("{http://www.w3.org/1999/xhtml}span")
        return [
            " ".join("".join(s.itertext()).split()) for s in spans if s.get("class") == "ocr_line"
        ]
    alto = "{http://www.loc.gov/standards/alto/ns-v4#}"
    return [
        " ".join(s.get("CONTENT", "") for s in line.iter(f"{alto}String"))
        for line in root.iter(f"{alto}TextLine")
    ]


def _same(read: str, truth: str) -> bool:
    return cer(re.sub(r"\s+", "", truth), re.sub(r"\s+", "", read)) <= 0.1


@pytest.mark.parametrize("accept", ["text/plain", "text/vnd.hocr+html", "application/alto+xml"])
def test_the_running_header_reads_first_and_the_page_number_last(
    server: Server, page: bytes, accept: str
) -> None:
    lines = _lines(server, page, accept)
    assert len(lines) > 20, lines
    assert _same(lines[0], HEADER), lines[:3]
    assert _same(lines[1], HEADING), lines[:3]
    assert lines[-1].strip() == FOOTER, lines[-3:]
