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
    markdown_table,
    missing_tesseract_langs,
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
    return Scan(label=label, kind=kind, lang="en", jpeg=jpeg.tobytes(), truth=truth)


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


def test_score_reads_each_page_and_groups_by_language_and_kind(tmp_path: Path) -> None:
    truths = ["Delivery to Baker Street", "The quick brown fox", "Jumps over the lazy dog"]
    read = ["Delivery to Baker Street", "The quick brown box", "Jvmqs ovxr thx lzy dg"]
    pages = tuple(
        Page(
            width=600,
            height=100,
            blocks=group_blocks([make_line(text, 0.9, [[10, 10], [500, 10], [500, 50], [10, 50]])]),
            index=i,
        )
        for i, text in enumerate(read)
    )
    pdf = tmp_path / "ours.pdf"
    pdf.write_bytes(render_bytes(Document(name="ours", pages=pages), "pdf"))
    kinds = [("english", "en"), ("degraded", "en"), ("chinese", "zh")]
    scans = [
        Scan(label=f"p{i}", kind=k, lang=lang, jpeg=b"", truth=t)
        for i, ((k, lang), t) in enumerate(zip(kinds, truths, strict=True))
    ]
    row = score("ours", pdf, scans, wall_s=4.0, correct_cer=0.1)
    # characters without spaces: 21, 16 and 19; the third page has 6 edits
    assert row["cer_by_kind"] == {
        "chinese": round(6 / 19, 4),
        "degraded": round(1 / 16, 4),
        "english": 0.0,
    }
    assert row["cer_by_lang"] == {"en": round(1 / (21 + 16), 4), "zh": round(6 / 19, 4)}
    assert row["cer"] == round(7 / (21 + 16 + 19), 4)
    assert row["pages_per_s"] == 0.75
    # only the pages read right count towards the correct rate
    assert (row["correct_pages"], row["correct_pages_per_s"]) == (2, 0.5)
    assert row["output_bytes"] == pdf.stat().st_size


def test_the_table_keeps_a_failed_tool_with_its_reason() -> None:
    ok = {
        "tool": "ours",
        "cer": 0.014,
        "cer_by_lang": {"en": 0.012, "zh": 0.016},
        "cer_by_kind": {"english": 0.018},
        "pages": 12,
        "correct_pages": 11,
        "pages_per_s": 0.274,
        "correct_pages_per_s": 0.251,
        "pages_per_s_after_startup": 0.383,
        "first_page_alone_s": 15.1,
        "output_bytes": 3380133,
    }
    failed = {"tool": "ocrmypdf-paddleocr 0.1.1", "error": "exit 2: Exception: no network"}
    lines = markdown_table([ok, failed], ["en", "zh"], ["degraded", "english"]).splitlines()
    assert lines[0].startswith("| tool | CER | CER en | CER zh | CER degraded | CER english |")
    assert lines[2] == (
        "| ours | 1.4% | 1.2% | 1.6% |  | 1.8% | 0.274 | 0.251 (11/12) | 0.383 | 15.1 | 3,380,133 |"
    )
    cells = lines[3].split(" | ")
    assert cells[1] == "failed: exit 2: Exception: no network"
    assert len(cells) == len(lines[0].split(" | "))


def test_tesseract_languages_missing_from_a_spec() -> None:
    assert missing_tesseract_langs("chi_sim+eng", {"eng", "osd"}) == ["chi_sim"]
    assert missing_tesseract_langs("eng", {"eng", "osd"}) == []


def test_the_rate_after_start_up_counts_the_pages_after_the_first() -> None:
    assert after_startup(12, wall_s=40.0, first_page_s=18.0) == round(11 / 22.0, 3)
    assert after_startup(12, wall_s=40.0, first_page_s=None) is None
    assert after_startup(12, wall_s=18.0, first_page_s=20.0) is None  # noise: no rate
    assert after_startup(1, wall_s=20.0, first_page_s=10.0) is None
