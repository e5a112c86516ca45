"""What `/v1/ocr` is asked to answer with (serving/http/ocr_outputs.py): `words` and `layout`
are true or false, and anything else is refused before any work (`words=yes` read as false)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from starlette.requests import Request
from starlette.responses import Response

from pipelines.types import PageResult
from serving.errors import ValidationFailed
from serving.http.ocr_outputs import Wanted, answer, wanted
from serving.http.uploads import file_name
from serving.outputs.document import Document
from serving.outputs.formats import Format, render_bytes
from serving.outputs.service import OutputStream
from serving.scheduling.memory_budget import Held, MemoryBudget
from serving.service.ocr import PageOutput
from serving.service.requests import Renderer
from tests import images


def _request(query: str) -> Request:
    return Request(
        {"type": "http", "method": "POST", "query_string": query.encode(), "headers": []}
    )


def test_words_and_layout_are_flags() -> None:
    want = wanted(_request("words=True&layout=1"))
    assert (want.words, want.layout) == (True, True)
    want = wanted(_request("words=false&layout=0"))
    assert (want.words, want.layout) == (False, False)
    assert (wanted(_request("")).words, wanted(_request("")).layout) == (False, False)


@pytest.mark.parametrize("query", ["words=yes", "layout=on", "words="])
def test_other_values_are_refused(query: str) -> None:
    name = query.partition("=")[0]
    with pytest.raises(ValidationFailed, match=rf"^{name} must be true or false"):
        wanted(_request(query))


def test_mode_is_skip_force_or_redo() -> None:
    assert wanted(_request("")).mode == "skip"
    assert wanted(_request("format=pdf&mode=redo")).mode == "redo"
    with pytest.raises(ValidationFailed, match=r"^mode must be skip, force or redo, got 'again'"):
        wanted(_request("mode=again"))


class _Renderer:
    """Renders in process, as the CPU worker would."""

    def __init__(self) -> None:
        self.document: Document | None = None

    async def render(self, document: Document, fmt: Format, *, source_bytes: int) -> OutputStream:
        self.document = document
        data = render_bytes(document, fmt)
        return OutputStream(data, Held(MemoryBudget(len(data)), 0))

    async def reading_orders(self, results: list[PageResult]) -> list[list[list[int]]]:
        return [[] for _ in results]


def _answer(fmt: str, name: str | None) -> tuple[Response, Document]:
    renderer = _Renderer()
    pages = [PageOutput(result=PageResult(width=40, height=30))]
    want = Wanted(format=fmt, words=False, layout=False)  # type: ignore[arg-type]
    png = images.encode_png(images.empty_page(40, 30))
    response = asyncio.run(answer(cast(Renderer, renderer), pages, png, "image", want, name=name))
    assert renderer.document is not None
    return response, renderer.document


@pytest.mark.parametrize("fmt", ["hocr", "alto", "pdf", "text"])
def test_a_rendered_answer_is_named_after_the_upload(fmt: str) -> None:
    """/v1/ocr's hOCR named `document.hocr` as its own image, ALTO's fileName was
    `document.alto.xml`, the PDF's title `document.pdf`, and no Content-Disposition was sent."""
    response, document = _answer(fmt, "scan.png")
    assert document.name == "scan.png"  # the hOCR's image, ALTO's fileName, the PDF's title
    extension = {"hocr": "hocr", "alto": "alto.xml", "pdf": "pdf", "text": "txt"}[fmt]
    assert response.headers["content-disposition"] == f'inline; filename="scan.png.{extension}"'
    assert response.headers["content-type"].count("charset") <= 1


def test_a_raw_body_is_a_document_and_other_names_are_encoded() -> None:
    response, document = _answer("pdf", None)
    assert document.name == "document"
    assert response.headers["content-disposition"] == 'inline; filename="document.pdf"'
    response, _ = _answer("pdf", "relevé.png")
    assert response.headers["content-disposition"] == (
        "inline; filename*=utf-8''relev%C3%A9.png.pdf"
    )


@pytest.mark.parametrize(
    ("sent", "name"),
    [("scan.png", "scan.png"), ("C:\\scans\\a.pdf", "a.pdf"), ("../x/y.png", "y.png"), ("", None)],
)
def test_the_uploads_name_loses_its_folders(sent: str, name: str | None) -> None:
    assert file_name(sent) == name
