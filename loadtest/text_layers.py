"""A searchable PDF's text layer as the tools people use read it (issue 48), and how it scores.

Extractors, each page's text as its tool gives it:

- `pdftotext` (poppler; its default mode: its own reading order, from the glyphs' positions),
- `pdftotext -raw` (the order of the text in the content stream),
- `pymupdf` (PyMuPDF's `page.get_text()`: MuPDF's blocks, in content-stream order),
- `pdfminer` (pdfminer.six's `extract_text`: its layout analysis' order).

PyMuPDF (AGPL) and pdfminer.six are test extras, imported only here when asked for.

Scores of a page: word F1 against the truth (`loadtest.accuracy.word_counts`: a word run into its
neighbour is lost), and CER against our own `format=text` (whitespace ignored: the order of the
characters, which is what a reader or a search across lines depends on).
"""

from __future__ import annotations

import io
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from typing import Any

from loadtest.accuracy import cer, word_counts

EXTRACTORS = ("pdftotext", "pdftotext-raw", "pymupdf", "pdfminer")


def pdftotext_pages(pdf: bytes, *args: str) -> list[str]:
    """Each page's text as `pdftotext ARGS` reads it."""
    out = subprocess.run(["pdftotext", *args, "-", "-"], input=pdf, capture_output=True, check=True)
    pages = out.stdout.decode("utf-8", "replace").split("\f")
    return pages[:-1] if len(pages) > 1 and not pages[-1].strip() else pages


def pymupdf_pages(pdf: bytes) -> list[str]:
    """Each page's `get_text()` (PyMuPDF's default: blocks as the content stream has them)."""
    import pymupdf  # a test extra (AGPL: tests and benches only)

    with pymupdf.Document(stream=pdf, filetype="pdf") as doc:  # type: ignore[no-untyped-call]
        return [str(page.get_text()) for page in doc]


def pdfminer_pages(pdf: bytes) -> list[str]:
    """Each page's text as pdfminer.six's `extract_text` reads it (its default layout analysis)."""
    from pdfminer.high_level import extract_text
    from pdfminer.pdfpage import PDFPage

    count = sum(1 for _ in PDFPage.get_pages(io.BytesIO(pdf)))
    return [extract_text(io.BytesIO(pdf), page_numbers=[i]) for i in range(count)]


_READERS: dict[str, Callable[[bytes], list[str]]] = {
    "pdftotext": pdftotext_pages,
    "pdftotext-raw": lambda pdf: pdftotext_pages(pdf, "-raw"),
    "pymupdf": pymupdf_pages,
    "pdfminer": pdfminer_pages,
}


def extract(pdf: bytes, tool: str) -> list[str]:
    """Each page's text as `tool` (one of `EXTRACTORS`) reads `pdf`."""
    return _READERS[tool](pdf)


def page_scores(truth: str, ours: str, read: dict[str, str]) -> dict[str, float]:
    """One page's scores: `f1_text` and `cer_text` (our `format=text` against the truth), and
    per extractor `f1_TOOL` (its text against the truth) and `cer_TOOL` (against our
    `format=text`)."""
    scores = {"f1_text": word_counts(truth, ours).f1, "cer_text": cer(truth, ours)}
    for tool, text in read.items():
        scores[f"f1_{tool}"] = word_counts(truth, text).f1
        scores[f"cer_{tool}"] = cer(ours, text)
    return scores


def mean(rows: Sequence[dict[str, float]], key: str) -> float:
    """The mean of `key` over the rows that have it (0.0 for none)."""
    values = [row[key] for row in rows if key in row]
    return sum(values) / len(values) if values else 0.0


def bbox_words(pdf: bytes) -> list[tuple[float, float, list[tuple[str, tuple[float, ...]]]]]:
    """Each page's width and height and its words as `pdftotext -bbox` places them: text and
    (x0, y0, x1, y1) in points, y down."""
    root = ET.fromstring(
        subprocess.run(
            ["pdftotext", "-bbox", "-", "-"], input=pdf, capture_output=True, check=True
        ).stdout
    )
    ns = "{http://www.w3.org/1999/xhtml}"
    pages = []
    for page in root.iter(f"{ns}page"):
        words = [
            (w.text or "", tuple(float(w.get(k, 0)) for k in ("xMin", "yMin", "xMax", "yMax")))
            for w in page.iter(f"{ns}word")
        ]
        pages.append((float(page.get("width", 0)), float(page.get("height", 0)), words))
    return pages


def words_on_print(pdf: bytes, page: dict[str, Any], index: int = 0) -> float:
    """The share of the words of a `/v1/ocr?words=true` JSON `page` (of two characters or more)
    whose printed box's centre lies in a word of the PDF's page `index` that holds their text,
    as poppler places it (`pdftotext -bbox`): what a viewer's selection of the word covers."""
    width_pt, _, found = bbox_words(pdf)[index]
    scale = width_pt / page["width"]
    words = [w for line in page["lines"] for w in line.get("words", []) if len(w["text"]) >= 2]
    on = 0
    for word in words:
        x0, y0, x1, y1 = (v * scale for v in word["box"])
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        on += any(
            word["text"] in text and box[0] <= cx <= box[2] and box[1] <= cy <= box[3]
            for text, box in found
        )
    return on / len(words) if words else 1.0
