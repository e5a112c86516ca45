"""Pages sent turned: a real document page sideways and upside down through `/v1/ocr` and `/ocr`
(`useDocOrientationClassify`) reads as the upright page does, with boxes on the page as sent."""

from __future__ import annotations

import base64
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np
import pypdfium2 as pdfium
import pytest

from loadtest.accuracy import cer
from pipelines.page_orientation import to_sent_points
from serving.convert import pdf_pages as pages
from tests.e2e.conftest import Server
from tests.images import encode_jpeg, encode_png, make_pdf
from tests.poppler import pdftotext

pytestmark = pytest.mark.e2e

PDF_NAME = "maint-guide.en.pdf"
DPI = 100
"""Small pages keep the test cheap; PP-OCRv5 reads them well at this size."""
MAX_CER = 0.01
"""Against the upright page's text: the same page, read turned, reads the same."""
BOX_TOLERANCE_PX = 3


@functools.cache
def upright_page() -> np.ndarray:
    (pdf,) = [p for p in pages.find_real_pdfs() if p.name == PDF_NAME]
    (page,) = pages.text_pages(pdf, 1, dpi=DPI)
    return page.image


def _post(server: Server, body: bytes, content_type: str, query: str = "") -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/v1/ocr{query}",
        content=body,
        headers={"content-type": content_type},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()["pages"][0]
    return page


def _text(lines: list[dict[str, Any]]) -> str:
    return "\n".join(line["text"] for line in lines)


@functools.cache
def _upright_answer(url: str) -> dict[str, Any]:
    server = Server(url=url, process=None, log=None)  # type: ignore[arg-type]
    return _post(server, encode_png(upright_page()), "image/png")


def _ink_share(image: np.ndarray, box: list[list[int]]) -> float:
    """Share of dark pixels inside a line's box on `image`."""
    points = np.asarray(box)
    x0, y0 = points.min(axis=0)
    x1, y1 = points.max(axis=0)
    gray = cv2.cvtColor(image[y0:y1, x0:x1], cv2.COLOR_BGR2GRAY)
    return float((gray < 128).mean()) if gray.size else 0.0


@pytest.mark.parametrize(
    ("quarters", "encode", "content_type", "angle"),
    [
        # np.rot90 turns counter-clockwise; the classifier names the turn back to upright.
        (1, encode_png, "image/png", 270),  # sideways
        (2, encode_jpeg, "image/jpeg", 180),  # upside down, a photo-like JPEG
    ],
)
def test_a_turned_image_reads_as_upright_with_boxes_on_the_sent_page(
    server: Server, quarters: int, encode: Any, content_type: str, angle: int
) -> None:
    upright = upright_page()
    upright_answer = _upright_answer(server.url)
    assert upright_answer["orientation"]["angle"] == 0
    assert upright_answer["orientation"]["turned"] is False
    sent = np.ascontiguousarray(np.rot90(upright, quarters))
    answer = _post(server, encode(sent), content_type)
    assert answer["orientation"]["angle"] == angle
    assert answer["orientation"]["turned"] is True
    assert answer["orientation"]["score"] > 0.6
    assert (answer["width"], answer["height"]) == (sent.shape[1], sent.shape[0])
    page_cer = cer(_text(upright_answer["lines"]), _text(answer["lines"]))
    print(f"turned {angle}: CER {page_cer:.4f} against the upright page")
    assert page_cer <= MAX_CER
    # Each line's box is an upright line's box carried onto the sent page, and lies on ink.
    height, width = upright.shape[:2]
    carried = [
        to_sent_points(np.array(line["box"]), angle, width, height)
        for line in upright_answer["lines"]
    ]
    off_px = [
        min(int(np.abs(np.array(line["box"]) - box).max()) for box in carried)
        for line in answer["lines"]
    ]
    assert np.mean([off <= BOX_TOLERANCE_PX for off in off_px]) > 0.95, off_px
    assert np.mean([_ink_share(sent, line["box"]) > 0.02 for line in answer["lines"]]) > 0.95


def test_a_sideways_pdf_page_reads_as_upright(server: Server) -> None:
    upright = upright_page()
    sent = np.ascontiguousarray(np.rot90(upright, 3))  # clockwise
    pdf = make_pdf([sent], dpi=DPI)
    answer = _post(server, pdf, "application/pdf")
    assert answer["orientation"]["angle"] == 90
    assert answer["orientation"]["turned"] is True
    assert answer["width"] > answer["height"]  # an A4 page on its side
    page_cer = cer(_text(_upright_answer(server.url)["lines"]), _text(answer["lines"]))
    print(f"sideways PDF: CER {page_cer:.4f} against the upright page")
    assert page_cer <= MAX_CER
    # The boxes fall on the text of the page as the server renders it (`/v1/render`).
    render = httpx.post(
        f"{server.url}/v1/render?page=0",
        content=pdf,
        headers={"content-type": "application/pdf"},
        timeout=300,
    )
    assert render.status_code == 200
    rendered = cv2.imdecode(np.frombuffer(render.content, np.uint8), cv2.IMREAD_COLOR)
    assert (rendered.shape[1], rendered.shape[0]) == (answer["width"], answer["height"])
    boxes = [line["box"] for line in answer["lines"]]
    # Lines of a page on its side run down it.
    assert np.mean([np.ptp(np.array(b)[:, 1]) > np.ptp(np.array(b)[:, 0]) for b in boxes]) > 0.9
    assert np.mean([_ink_share(rendered, b) > 0.02 for b in boxes]) > 0.95


def test_orientation_off_reads_the_page_as_sent(server: Server) -> None:
    sent = np.ascontiguousarray(np.rot90(upright_page(), 2))
    answer = _post(server, encode_png(sent), "image/png", "?orientation=off")
    assert "orientation" not in answer
    assert cer(_text(_upright_answer(server.url)["lines"]), _text(answer["lines"])) > 0.5


def _paddlex(server: Server, image: np.ndarray, **fields: Any) -> dict[str, Any]:
    body = {"file": base64.b64encode(encode_png(image)).decode(), "fileType": 1, **fields}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=300)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]["ocrResults"][0]["prunedResult"]
    return result


def test_paddlex_doc_orientation_classify(server: Server) -> None:
    upright = upright_page()
    sent = np.ascontiguousarray(np.rot90(upright, 1))
    turned = _paddlex(server, sent, useDocOrientationClassify=True)
    assert turned["model_settings"]["use_doc_preprocessor"] is True
    assert turned["doc_preprocessor_res"] == {
        "model_settings": {"use_doc_orientation_classify": True, "use_doc_unwarping": False},
        "angle": 270,
    }
    assert list(turned)[:3] == ["model_settings", "doc_preprocessor_res", "dt_polys"]
    reference = _paddlex(server, upright)
    assert "doc_preprocessor_res" not in reference  # PaddleX's default: not asked, not run
    assert reference["model_settings"]["use_doc_preprocessor"] is False
    page_cer = cer("\n".join(reference["rec_texts"]), "\n".join(turned["rec_texts"]))
    assert page_cer <= MAX_CER
    height, width = upright.shape[:2]
    for box in turned["rec_polys"]:
        assert all(0 <= x <= sent.shape[1] and 0 <= y <= sent.shape[0] for x, y in box)
    assert np.mean([_ink_share(sent, box) > 0.02 for box in turned["rec_polys"]]) > 0.95
    assert (width, height) == (sent.shape[0], sent.shape[1])


def test_doc_unwarping_stays_refused(server: Server) -> None:
    body = {"file": base64.b64encode(encode_png(upright_page())).decode(), "useDocUnwarping": True}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=60)
    assert response.status_code == 422
    assert "useDocUnwarping" in response.json()["errorMsg"]


def _shown(pdf: bytes) -> np.ndarray:
    """The PDF's first page as a viewer shows it (pdfium applies /Rotate), gray, 50 dpi."""
    document = pdfium.PdfDocument(pdf)
    try:
        image = document[0].render(scale=50 / 72).to_numpy()
    finally:
        document.close()
    return cv2.cvtColor(np.ascontiguousarray(image[:, :, :3]), cv2.COLOR_BGR2GRAY)


def _looks_like(shown: np.ndarray, page: np.ndarray) -> float:
    """Correlation of a shown page with `page` (BGR) at the shown page's size."""
    gray = cv2.cvtColor(page, cv2.COLOR_BGR2GRAY)
    resized = cv2.resize(gray, (shown.shape[1], shown.shape[0]), interpolation=cv2.INTER_AREA)
    return float(np.corrcoef(shown.ravel(), resized.ravel())[0, 1])


@pytest.mark.parametrize(
    ("quarters", "content_type"), [(1, "image/png"), (2, "image/jpeg"), (3, "application/pdf")]
)
def test_a_turned_page_makes_an_upright_searchable_pdf(
    server: Server, quarters: int, content_type: str
) -> None:
    upright = upright_page()
    sent = np.ascontiguousarray(np.rot90(upright, quarters))
    if content_type == "application/pdf":
        body = make_pdf([sent], dpi=DPI)
    else:
        body = encode_png(sent) if content_type == "image/png" else encode_jpeg(sent)
    response = httpx.post(
        f"{server.url}/v1/ocr?format=pdf",
        content=body,
        headers={"content-type": content_type},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    shown = _shown(response.content)
    # Shown upright: like the upright page, not like the page as sent.
    assert shown.shape[0] > shown.shape[1]
    assert _looks_like(shown, upright) > 0.8
    text = pdftotext(response.content)
    page_cer = cer(_text(_upright_answer(server.url)["lines"]), text)
    print(f"turned {90 * quarters} as PDF: pdftotext CER {page_cer:.4f}")
    assert page_cer <= 0.05  # pdftotext's own line breaks and spacing


def test_hocr_and_alto_describe_the_page_as_read(server: Server) -> None:
    upright = upright_page()
    sent = np.ascontiguousarray(np.rot90(upright, 1))
    height, width = upright.shape[:2]
    for fmt, size in (("hocr", f"bbox 0 0 {width} {height}"), ("alto", f'WIDTH="{width}"')):
        response = httpx.post(
            f"{server.url}/v1/ocr?format={fmt}",
            content=encode_png(sent),
            headers={"content-type": "image/png"},
            timeout=300,
        )
        assert response.status_code == 200, response.text
        assert size in response.text


def test_ocr_batch_through_a_job_reads_turned_pages_upright(server: Server, tmp_path: Path) -> None:
    """`ocr-batch --server`: the pages go through the jobs API (`POST /v1/jobs`) at background
    priority, with the server's default `orientation=auto`."""
    upright = upright_page()
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "sideways.png").write_bytes(encode_png(np.ascontiguousarray(np.rot90(upright, 1))))
    (inputs / "upside-down.jpg").write_bytes(
        encode_jpeg(np.ascontiguousarray(np.rot90(upright, 2)))
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "serving.batch.cli", str(inputs), "--out", str(out)]
    command += ["--server", server.url, "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    records = {
        r["file"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())
    }
    reference = _text(_upright_answer(server.url)["lines"])
    for name, angle in (("sideways.png", 270), ("upside-down.jpg", 180)):
        assert records[name]["orientation"]["angle"] == angle
        assert cer(reference, _text(records[name]["lines"])) <= MAX_CER


def test_layout_reads_a_sideways_page_in_the_upright_pages_order(server: Server) -> None:
    upright = upright_page()
    sent = np.ascontiguousarray(np.rot90(upright, 1))
    headers = {"content-type": "image/png"}

    def ordered(image: np.ndarray) -> list[str]:
        response = httpx.post(
            f"{server.url}/v1/ocr?layout=true",
            content=encode_png(image),
            headers=headers,
            timeout=300,
        )
        assert response.status_code == 200, response.text
        page = response.json()["pages"][0]
        return [page["lines"][i]["text"] for block in page["blocks"] for i in block["lines"]]

    assert cer("\n".join(ordered(upright)), "\n".join(ordered(sent))) <= MAX_CER
