"""Outputs rendered off the event loop, their bytes held in the memory budget
(`serving.outputs.service`), and documents of several pages in each format."""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from PIL import Image

from serving.errors import PayloadTooLarge
from serving.outputs.document import Document, Page, Source, group_blocks, make_line
from serving.outputs.formats import render_bytes
from serving.outputs.service import EMBED_BYTES_PER_PX, render_cost, render_document
from serving.scheduling.memory_budget import MemoryBudget

T = TypeVar("T")
needs_poppler = pytest.mark.skipif(
    shutil.which("pdfimages") is None, reason="poppler-utils (scripts/system-deps.sh)"
)


class RecordingPool:
    """Runs the call in process, as `CpuPool.run` does in a worker, noting the budget it ran
    under."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held: list[int] = []

    async def run(
        self, fn: Callable[..., T], *args: Any, priority: int = 0, holding: object = None
    ) -> T:
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


def test_a_stored_native_page_renders_as_the_result_did() -> None:
    from pipelines.types import PageResult, TextLine, Word
    from serving.outputs.document import page_from_json, page_from_result, page_json

    poly = np.array([[10, 10], [300, 10], [300, 40], [10, 40]], np.int16)
    words = (Word("page", (10, 10, 80, 40), 0.9), Word("line", (90, 10, 300, 40), 0.8))
    result = PageResult(
        width=800,
        height=600,
        lines=[TextLine(text="page line", score=0.85, poly=poly, words=words)],
    )
    stored = {"page": 2, **page_json(result, words=True, layout=True)}
    assert page_from_json(stored) == page_from_result(result, index=2)
    # Stored before words were kept: each line is one word on its box.
    bare = page_from_json({"page": 0, **page_json(result)})
    assert [w.text for w in bare.lines[0].words] == ["page line"]
    with pytest.raises(ValueError, match="native"):
        page_from_json({"lines": []})


@needs_poppler
def test_pdf_of_a_multi_frame_tiff_has_a_page_per_frame(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (400, 300), (255, 255, 255)), Image.new("L", (400, 500), 255)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:])
    pages = tuple(
        Page(width=w, height=h, blocks=_document(1).pages[0].blocks, index=i)
        for i, (w, h) in enumerate([(400, 300), (400, 500)])
    )
    document = Document(
        name="scan.tiff", pages=pages, source=Source("image/tiff", buffer.getvalue())
    )
    path = tmp_path / "out.pdf"
    path.write_bytes(render_bytes(document, "pdf"))
    listing = subprocess.run(
        ["pdfimages", "-list", str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()[2:]
    assert [(row.split()[0], row.split()[3], row.split()[4]) for row in listing] == [
        ("1", "400", "300"),
        ("2", "400", "500"),
    ]
    text = subprocess.run(
        ["pdftotext", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert text.count("page 0 line") == 2


def test_a_page_decoded_smaller_is_rendered_in_the_pixels_it_was_sent_in() -> None:
    from pipelines.types import PageResult, TextLine, Word
    from serving.outputs.document import page_from_result

    poly = np.array([[10, 10], [300, 10], [300, 40], [10, 40]], np.int16)
    line = TextLine(text="x", score=0.9, poly=poly, words=(Word("x", (10, 10, 300, 40), 0.9),))
    page = page_from_result(PageResult(width=800, height=600, lines=[line]), sent=(1600, 1200))
    assert (page.width, page.height) == (1600, 1200)
    (scaled,) = page.lines
    assert scaled.box == scaled.words[0].box == (20, 20, 600, 80)
    assert scaled.poly[2] == (600, 80)
    assert page.blocks[0].box == (20, 20, 600, 80)


def test_an_image_upload_is_charged_its_frame_decoded_at_the_size_sent() -> None:
    """`_embed` decodes the frame as sent (up to 178 Mpx): 16 bytes a pixel, where 4 were
    charged (issue 49); a PDF upload's pages still 4."""
    image = dataclasses.replace(_document(), source=Source("image/png", b"x"))
    pdf = dataclasses.replace(_document(), source=Source("application/pdf", b"x"))
    assert render_cost(image, "pdf", 1000) - render_cost(image, "alto", 1000) == (
        3 * 1000 + EMBED_BYTES_PER_PX * 800 * 600
    )
    assert (
        render_cost(pdf, "pdf", 1000) - render_cost(pdf, "alto", 1000) == 3 * 1000 + 4 * 800 * 600
    )
