"""Rendering a document in a CPU worker, its bytes counted in the memory budget, and streamed.

The event loop does no rendering (a PDF of a long scan takes a while): `render_document` hands
the document to the CPU pool and holds, while the worker renders, an estimate of what it needs
(the upload read, an image frame decoded where it cannot go in as sent, the output); the answer
then holds its own size until the last piece has been sent (`OutputStream`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from serving.errors import PayloadTooLarge
from serving.outputs.document import Document
from serving.outputs.formats import Format, render_bytes
from serving.scheduling.memory_budget import Held, MemoryBudget
from serving.workers.cpu_pool import CpuPool

_WORD_BYTES = 400
"""Output and working bytes per word, in the largest format (hOCR's markup)."""
EMBED_BYTES_PER_PX = 16
"""What embedding an image upload's frame in a PDF holds per pixel of the frame *as sent*
(`serving.outputs.pdf._embed` decodes it at that size, up to `input.max_image_pixels`: 178
Mpx): the decoded frame, fpdf2's copy and its compression (15.8 measured for a 4000 x 4000 RGB
PNG, `ocr-bench embed-memory`; a JPEG sent as it is holds 2.3, but one EXIF turns
is decoded). As `serving.jobs.document_files.SOURCE_BYTES_PER_PX` for a job's documents."""
_PDF_PAGE_BYTES_PER_PX = 4
"""A PDF upload's page: its frame re-encoded losslessly where the text layer needs it."""
_PAGE_BYTES = 64 * 1024
_CHUNK_BYTES = 1 << 20


def render_cost(document: Document, fmt: Format, source_bytes: int) -> int:
    """Bytes a worker holds rendering `document` in `fmt`, at most (an estimate).

    PDF: the upload read and parsed (three copies), the output, and the largest page's frame: an
    image upload's decoded at the size it was sent (`EMBED_BYTES_PER_PX`; the document's pages
    are in the sent page's pixels), a PDF's page re-encoded (4 bytes a pixel). Before, an image
    was charged 4 bytes a pixel too, where embedding it took up to 16 (issue 49, item 6). Others:
    the markup.
    """
    words = sum(len(line.words) + 1 for page in document.pages for line in page.lines)
    cost = _WORD_BYTES * words + _PAGE_BYTES * len(document.pages)
    if fmt == "pdf":
        largest = max((page.width * page.height for page in document.pages), default=0)
        image = document.source is not None and document.source.media_type != "application/pdf"
        per_px = EMBED_BYTES_PER_PX if image else _PDF_PAGE_BYTES_PER_PX
        cost += 3 * source_bytes + per_px * largest
    return cost


async def render_document(
    cpu: CpuPool,
    budget: MemoryBudget,
    document: Document,
    fmt: Format,
    *,
    source_bytes: int = 0,
    priority: int = 0,
) -> OutputStream:
    """`document` rendered in `fmt` by a CPU worker, while its cost is held in the budget.

    Args:
        cpu: The CPU pool.
        budget: The server's memory budget.
        document: What to render.
        fmt: Any format but "json".
        source_bytes: The upload's size (a document whose source is a path is read by the
            worker).
        priority: The CPU pool's priority (a batch job's downloads: background).

    Raises:
        PayloadTooLarge: the render could never fit in the budget.
    """
    cost = render_cost(document, fmt, source_bytes)
    if cost > budget.total_bytes:
        raise PayloadTooLarge(
            f"Rendering this document as {fmt} needs about {cost >> 20} MiB (an image is "
            f"embedded as it was sent); pages may take {budget.total_bytes >> 20} MiB of this "
            "server's memory budget (server.memory_budget_bytes): ask for another format, or "
            "send the image smaller"
        )
    async with budget.hold(cost) as held:
        # Held until the worker is done with it, even once the caller went away.
        data: bytes = await cpu.run(render_bytes, document, fmt, priority=priority, holding=held)
        # The render's charge becomes the output's, never past the budget's total.
        return OutputStream(data, await budget.answer_from(held.take(), len(data)))


class OutputStream:
    """A rendered output, sent in pieces; its bytes leave the budget once sent (or dropped)."""

    def __init__(self, data: bytes, held: Held) -> None:
        self._data: bytes | None = data
        self._held = held
        self.size = len(data)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            data = self._data or b""
            for start in range(0, len(data), _CHUNK_BYTES):
                yield data[start : start + _CHUNK_BYTES]
        finally:
            self.close()

    def close(self) -> None:
        """Give its bytes back to the budget (once)."""
        if self._data is not None:
            self._data = None
            self._held.release()
