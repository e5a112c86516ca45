"""Outputs rendered off the event loop, their bytes held in the memory budget
(`serving.outputs.service`), and documents of several pages in each format."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from serving.errors import PayloadTooLarge
from serving.outputs.document import Document, Page, group_blocks, make_line
from serving.outputs.formats import render_bytes
from serving.outputs.service import render_cost, render_document
from serving.scheduling.memory_budget import MemoryBudget

T = TypeVar("T")


class RecordingPool:
    """Runs the call in process, as `CpuPool.run` does in a worker, noting the budget it ran
    under."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held: list[int] = []

    async def run(self, fn: Callable[..., T], *args: Any, priority: int = 0) -> T:
        self.held.append(self.budget.used_bytes)
        return fn(*args)


def _document(pages: int = 2) -> Document:
    return Document(
        name="scan.tiff",
        pages=tuple(
            Page(
                width=800,
                height=600,
                blocks=group_blocks(
                    [make_line(f"page {i} line", 0.9, [[10, 10], [300, 10], [300, 40], [10, 40]])]
                ),
                index=i,
            )
            for i in range(pages)
        ),
    )


@pytest.mark.anyio
async def test_rendering_holds_its_cost_then_its_bytes_until_sent() -> None:
    budget = MemoryBudget(10_000_000)
    pool = RecordingPool(budget)
    document = _document()
    stream = await render_document(pool, budget, document, "hocr")  # type: ignore[arg-type]
    assert pool.held == [render_cost(document, "hocr", 0)]
    assert budget.used_bytes == stream.size == len(render_bytes(document, "hocr"))
    sent = b"".join([piece async for piece in stream])
    assert sent == render_bytes(document, "hocr")
    assert budget.used_bytes == 0
    stream.close()  # once only
    assert budget.used_bytes == 0


@pytest.mark.anyio
async def test_a_stream_never_sent_gives_its_bytes_back_when_closed() -> None:
    budget = MemoryBudget(10_000_000)
    stream = await render_document(RecordingPool(budget), budget, _document(), "text")  # type: ignore[arg-type]
    assert budget.used_bytes > 0
    stream.close()
    assert budget.used_bytes == 0


@pytest.mark.anyio
async def test_a_render_that_could_never_fit_is_refused() -> None:
    budget = MemoryBudget(1000)
    with pytest.raises(PayloadTooLarge):
        await render_document(
            RecordingPool(budget), budget, _document(), "pdf", source_bytes=10_000
        )  # type: ignore[arg-type]


def test_pdf_cost_counts_the_upload_and_a_decoded_frame() -> None:
    document = _document()
    assert render_cost(document, "pdf", 1000) - render_cost(document, "alto", 1000) == (
        3 * 1000 + 4 * 800 * 600
    )


def test_every_page_of_a_document_is_in_each_format() -> None:
    document = _document(pages=3)
    hocr = ET.fromstring(render_bytes(document, "hocr"))
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    pages = hocr.findall(".//h:div[@class='ocr_page']", ns)
    assert [p.get("title") for p in pages] == [
        f'image "scan.tiff"; bbox 0 0 800 600; ppageno {i}' for i in range(3)
    ]
    meta = hocr.find(".//h:meta[@name='ocr-number-of-pages']", ns)
    assert meta is not None
    assert meta.get("content") == "3"
    alto = ET.fromstring(render_bytes(document, "alto"))
    a = {"a": "http://www.loc.gov/standards/alto/ns-v4#"}
    assert [p.get("PHYSICAL_IMG_NR") for p in alto.findall(".//a:Page", a)] == ["1", "2", "3"]
    text = render_bytes(document, "text").decode()
    assert text.split("\f") == [f"page {i} line\n" for i in range(3)]
