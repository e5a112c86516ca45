"""The OCRmyPDF comparison's own parts: the scans go into the input PDF as the JPEGs they are, and
a PDF's text is scored page by page against the truth through `pdftotext`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import pytest

from loadtest.bench.ocrmypdf_compare import (
    Scan,
    after_startup,
    degrade,
    pdf_page_texts,
    scans_pdf,
    score,
)
from serving.outputs.document import Document, Page, group_blocks, make_line
from serving.outputs.formats import render_bytes
from tests import images

pytestmark = pytest.mark.skipif(
    shutil.which("pdftotext") is None, reason="poppler-utils (scripts/system-deps.sh)"
)
pytest.importorskip("img2pdf")


def _scan(label: str, kind: str, truth: str, *, degraded: bool = False) -> Scan:
    image = images.latin_lines().image
    pixels = degrade(image, seed=1) if degraded else image
    ok, jpeg = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 80])
    assert ok
    return Scan(label=label, kind=kind, jpeg=jpeg.tobytes(), truth=truth)


def test_scans_are_embedded_as_sent(tmp_path: Path) -> None:
    scans = [_scan("a", "english", "x"), _scan("b", "degraded", "y", degraded=True)]
    path = tmp_path / "scans.pdf"
    scans_pdf(scans, 150.0, path)
    listing = subprocess.run(
        ["pdfimages", "-list", str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()[2:]
    height, width = images.latin_lines().image.shape[:2]
    assert len(listing) == 2
    for row in listing:
        fields = row.split()
        assert (int(fields[3]), int(fields[4]), fields[8]) == (width, height, "jpeg")
    assert pdf_page_texts(path, 2) == ["\f", "\f"]  # image only: no text yet


def test_score_reads_each_page_and_groups_by_kind(tmp_path: Path) -> None:
    truths = ["Delivery to Baker Street", "The quick brown fox"]
    pages = tuple(
        Page(
            width=600,
            height=100,
            blocks=group_blocks([make_line(text, 0.9, [[10, 10], [500, 10], [500, 50], [10, 50]])]),
            index=i,
        )
        for i, text in enumerate(["Delivery to Baker Street", "The quick brown box"])
    )
    pdf = tmp_path / "ours.pdf"
    pdf.write_bytes(render_bytes(Document(name="ours", pages=pages), "pdf"))
    scans = [
        Scan(label=f"p{i}", kind=k, jpeg=b"", truth=t)
        for i, (k, t) in enumerate(zip(["english", "degraded"], truths, strict=True))
    ]
    row = score("ours", pdf, scans, wall_s=4.0)
    assert row["cer_by_kind"] == {"degraded": round(1 / 16, 4), "english": 0.0}
    assert row["cer"] == round(1 / (21 + 16), 4)  # characters without spaces
    assert row["pages_per_s"] == 0.5
    assert row["output_bytes"] == pdf.stat().st_size


def test_the_rate_after_start_up_counts_the_pages_after_the_first() -> None:
    assert after_startup(12, wall_s=40.0, first_page_s=18.0) == round(11 / 22.0, 3)
    assert after_startup(12, wall_s=40.0, first_page_s=None) is None
    assert after_startup(12, wall_s=18.0, first_page_s=20.0) is None  # noise: no rate
    assert after_startup(1, wall_s=20.0, first_page_s=10.0) is None
