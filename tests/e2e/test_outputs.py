"""Documents out of a real `ocr-serve`: words, reading order and every format, read back by real
consumers (poppler's `pdftotext` and `pdfimages`, qpdf, the `hocr-spec` validator, OCRmyPDF's
hOCR reader, `alto-tools`) on pages rendered here with known text and word boxes."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image, ImageDraw

from loadtest.accuracy import cer
from pipelines.words import split_words
from tests import images
from tests.e2e.conftest import Server
from tests.poppler import needs_poppler, pdfimages, pdftotext

BIN = Path(sys.executable).parent

TITLE = "Quarterly Field Report"
LEFT = [
    "The river rose two metres",
    "after heavy rain in March",
    "and the old bridge closed",
    "for repairs until summer.",
]
RIGHT = [
    "Farmers moved their cattle",
    "to the northern pastures",
    "where the grass grew back",
    "quickly in early April.",
]
CHINESE = "中文OCR测试"


def _render(
    lines: list[tuple[str, int, int, str]], size: tuple[int, int]
) -> tuple[np.ndarray, list[tuple[str, tuple[int, int, int, int]]]]:
    """A white page with `lines` (text, x, y, font kind) drawn at 30 px; the true box of each
    word."""
    page = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(page)
    words = []
    for text, x, y, kind in lines:
        font = images._font(kind, 30)
        draw.text((x, y), text, font=font, fill=(0, 0, 0))
        for start, end in split_words(text):  # as the server splits them: CJK runs apart
            left = x + font.getlength(text[:start])
            x0, y0, x1, y1 = font.getbbox(text[start:end], anchor="la")
            words.append((text[start:end], (int(left + x0), y + y0, int(left + x1), y + y1)))
    rgb = np.asarray(page, dtype=np.uint8)
    return np.ascontiguousarray(rgb[:, :, ::-1]), words


@pytest.fixture(scope="module")
def two_columns() -> tuple[np.ndarray, list[tuple[str, tuple[int, int, int, int]]]]:
    """A page with a title across two columns of four lines each (rows at one height), the
    left one ending with a fifth, Chinese, line."""
    lines = [(TITLE, 470, 40, "latin")]
    for row, (left, right) in enumerate(zip(LEFT, RIGHT, strict=True)):
        lines.append((left, 60, 140 + 55 * row, "latin"))
        lines.append((right, 760, 140 + 55 * row, "latin"))
    lines.append((CHINESE, 60, 140 + 55 * 4, "chinese"))
    return _render(lines, (1400, 520))


READING_ORDER = [TITLE, *LEFT, CHINESE, *RIGHT]


def _post(server: Server, data: bytes, media: str, query: str = "", **headers: str):
    return httpx.post(
        f"{server.url}/v1/ocr{query}",
        content=data,
        headers={"Content-Type": media, **headers},
        timeout=120,
    )


def _png(image: np.ndarray) -> bytes:
    return images.encode_png(image)


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_json_words_and_blocks(server: Server, two_columns) -> None:
    image, truth = two_columns
    plain = _post(server, _png(image), "image/png")
    asked = _post(server, _png(image), "image/png", "?words=true&layout=true")
    assert plain.status_code == asked.status_code == 200, asked.text
    (page,) = asked.json()["pages"]
    # The lines stay in PaddleOCR's order, as without the options; words and blocks are added.
    assert [(line["text"], line["box"]) for line in page["lines"]] == [
        (line["text"], line["box"]) for line in plain.json()["pages"][0]["lines"]
    ]
    assert "blocks" not in plain.json()["pages"][0]
    assert "words" not in plain.json()["pages"][0]["lines"][0]
    texts = [line["text"] for line in page["lines"]]
    by_block = [texts[i] for block in page["blocks"] for i in block["lines"]]
    assert by_block == READING_ORDER
    assert texts != READING_ORDER  # PaddleOCR's order interleaves the columns
    # Each word where it is printed: the true box of the word with its text overlaps its box by
    # at least half of either, and the words of a line give back its text.
    true_boxes: dict[str, list[tuple[int, int, int, int]]] = {}
    for word, box in truth:
        true_boxes.setdefault(word, []).append(box)
    matched = 0
    for line in page["lines"]:
        assert " ".join(w["text"] for w in line["words"]) == line["text"] or (
            "".join(w["text"] for w in line["words"]) == line["text"]
        )
        for word in line["words"]:
            if word["text"] not in true_boxes:
                continue
            matched += 1
            assert max(_overlap(word["box"], box) for box in true_boxes[word["text"]]) >= 0.5, (
                word,
                true_boxes[word["text"]],
            )
    assert matched >= 0.9 * len(truth)
    chinese = [w for line in page["lines"] for w in line["words"] if w["text"] in ("中文", "测试")]
    assert len(chinese) == 2  # the CJK runs each a word, boxed where they are printed


def _overlap(a: list[int] | tuple[int, ...], b: tuple[int, int, int, int]) -> float:
    """Intersection over the smaller of the two boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return w * h / max(smaller, 1)


def test_text_reads_column_by_column(server: Server, two_columns) -> None:
    image, _ = two_columns
    answer = _post(server, _png(image), "image/png", Accept="text/plain")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert [line for line in answer.text.splitlines() if line] == READING_ORDER


def test_formats_refused_with_their_status(server: Server, two_columns) -> None:
    image, _ = two_columns
    refused = _post(server, _png(image), "image/png", Accept="image/png")
    assert refused.status_code == 406
    assert refused.json()["error"]["code"] == "not_acceptable"
    unknown = _post(server, _png(image), "image/png", "?format=docx")
    assert unknown.status_code == 422


def test_hocr_is_valid_and_ocrmypdf_reads_our_text(
    server: Server, two_columns, tmp_path: Path
) -> None:
    image, _ = two_columns
    answer = _post(server, _png(image), "image/png", Accept="text/vnd.hocr+html")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/vnd.hocr+html")
    path = tmp_path / "page.hocr"
    path.write_bytes(answer.content)
    checked = subprocess.run(
        [BIN / "hocr-spec", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0
    assert "Document is valid" in checked.stdout + checked.stderr
    root = ET.parse(path).getroot()
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    lines = root.findall(".//h:span[@class='ocr_line']", ns)
    assert ["".join(line.itertext()).strip() for line in lines] == READING_ORDER
    (page,) = root.findall(".//h:div[@class='ocr_page']", ns)
    assert "bbox 0 0 1400 520" in page.get("title", "")
    if shutil.which("pdftotext") is not None:
        pdf = tmp_path / "ocrmypdf.pdf"
        subprocess.run(
            [sys.executable, "-m", "ocrmypdf.hocrtransform", "-r", "72", str(path), str(pdf)],
            check=True,
            capture_output=True,
        )
        text = subprocess.run(
            ["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True
        ).stdout
        assert _squash(text) == _squash("".join(READING_ORDER))


def test_alto_reads_back_with_alto_tools(server: Server, two_columns, tmp_path: Path) -> None:
    image, _ = two_columns
    answer = _post(server, _png(image), "image/png", "?format=alto")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/alto+xml")
    path = tmp_path / "page.xml"
    path.write_bytes(answer.content)
    read = subprocess.run(
        [BIN / "alto-tools", "-t", str(path)], capture_output=True, text=True, check=True
    )
    assert [_squash(line) for line in read.stdout.splitlines() if line.strip()] == [
        _squash(line) for line in READING_ORDER
    ]
    ns = {"a": "http://www.loc.gov/standards/alto/ns-v4#"}
    page = ET.parse(path).getroot().find(".//a:Page", ns)
    assert page is not None
    assert (page.get("WIDTH"), page.get("HEIGHT")) == ("1400", "520")


@needs_poppler
@pytest.mark.parametrize(("kind", "encoding"), [("png", "image"), ("jpeg", "jpeg")])
def test_pdf_of_an_image(
    server: Server, two_columns, tmp_path: Path, kind: str, encoding: str
) -> None:
    image, _ = two_columns
    data = _png(image) if kind == "png" else images.encode_jpeg(image, quality=95)
    answer = _post(server, data, f"image/{kind}", "?format=pdf")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/pdf"
    path = tmp_path / "out.pdf"
    path.write_bytes(answer.content)
    checked = subprocess.run(["qpdf", "--check", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ((*_, width, height, _c, _n, _b, enc, _i, _o, _g, _x, _y, _s, _r),) = pdfimages(path)
    assert (int(width), int(height), enc) == (1400, 520, encoding)
    json_lines = _post(server, data, f"image/{kind}").json()["pages"][0]["lines"]
    text = pdftotext(answer.content, "-raw")
    assert cer(_squash("".join(READING_ORDER)), _squash(text)) == 0.0
    assert _squash(text) == _squash("".join(line["text"] for line in _reading(json_lines)))
    # pdftotext finds each word inside its box (page points = pixels x 72 / 300).
    words = _post(server, data, f"image/{kind}", "?words=true").json()["pages"][0]["lines"]
    boxes = {}
    for line in words:
        for word in line["words"]:
            boxes.setdefault(word["text"], []).append(word["box"])
    found = re.findall(
        r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>',
        pdftotext(answer.content, "-bbox"),
    )
    scale = 72 / 300
    for x0, y0, x1, y1, text in found:
        if text not in boxes:  # words that touch are one word to pdftotext
            continue
        assert any(
            float(x0) >= b[0] * scale - 1
            and float(x1) <= b[2] * scale + 1
            and float(y0) >= b[1] * scale - 1
            and float(y1) <= b[3] * scale + 1
            for b in boxes[text]
        ), (text, x0, y0, x1, y1, boxes[text])


def _reading(lines: list[dict]) -> list[dict]:
    """The JSON lines in the order the text output reads them (the same layout)."""
    by_text = {line["text"]: line for line in lines}
    return [by_text[text] for text in READING_ORDER if text in by_text]


@needs_poppler
def test_pdf_of_a_pdf_keeps_its_pages(server: Server, two_columns, tmp_path: Path) -> None:
    image, _ = two_columns
    original = images.make_pdf([image, image], dpi=144.0)
    (tmp_path / "in.pdf").write_bytes(original)
    answer = _post(server, original, "application/pdf", Accept="application/pdf")
    assert answer.status_code == 200
    path = tmp_path / "out.pdf"
    path.write_bytes(answer.content)
    checked = subprocess.run(["qpdf", "--check", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The pages' own images, unchanged (nothing re-rasterised), and the text on both pages.
    ids = slice(10, 12)
    before = [row[: ids.start] + row[ids.stop :] for row in pdfimages(tmp_path / "in.pdf")]
    after = [row[: ids.start] + row[ids.stop :] for row in pdfimages(path)]
    assert after == before
    # The text on both pages, as the JSON reads them in reading order (the PDF's page images
    # are JPEGs: their text may differ a little from the PNG's).
    ocr = _post(server, original, "application/pdf", "?layout=true").json()["pages"]
    expected = [
        _squash("".join(page["lines"][i]["text"] for b in page["blocks"] for i in b["lines"]))
        for page in ocr
    ]
    pages = pdftotext(answer.content, "-raw").split("\f")
    assert [_squash(p) for p in pages if p.strip()] == expected
    assert cer(_squash("".join(READING_ORDER)), expected[0]) < 0.05


def test_paddlex_return_word_box(server: Server, two_columns) -> None:
    image, _ = two_columns
    body = {"file": base64.b64encode(_png(image)).decode(), "fileType": 1, "returnWordBox": True}
    answer = httpx.post(f"{server.url}/ocr", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    pruned = answer.json()["result"]["ocrResults"][0]["prunedResult"]
    assert pruned["return_word_box"] is True
    assert len(pruned["text_word"]) == len(pruned["text_word_boxes"]) == len(pruned["rec_texts"])
    for text, words, boxes in zip(
        pruned["rec_texts"], pruned["text_word"], pruned["text_word_boxes"], strict=True
    ):
        assert _squash(text) == "".join(words)
        assert len(boxes) == len(words)
        assert all(len(box) == 4 and box[0] < box[2] and box[1] < box[3] for box in boxes)
