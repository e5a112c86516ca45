"""Rendering a document in a CPU worker, its bytes counted in the memory budget, and streamed.

The event loop does no rendering (a PDF of a long scan takes a while): `render_document` hands
the document to the CPU pool and holds, while the worker renders, an estimate of what it needs
(the upload read, an image frame decoded where it cannot go in as sent, the output); the answer
then holds its own size until the last piece has been sent (`OutputStream`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from serving.outputs.document import Document
from serving.outputs.formats import Format, render_bytes
from serving.scheduling.memory_budget import Held, MemoryBudget
from serving.workers.cpu_pool import CpuPool

_WORD_BYTES = 400
"""Output and working bytes per word, in the largest format (hOCR's markup)."""
_PAGE_BYTES = 64 * 1024
_CHUNK_BYTES = 1 << 20


def render_cost(document: Document, fmt: Format, source_bytes: int) -> int:
    """Bytes a worker holds rendering `document` in `fmt`, at most (an estimate).

    PDF: the upload read and parsed (three copies), each page's image frame decoded (4 bytes a
    pixel of the OCR page, for a frame re-encoded losslessly), the output; others: the markup.
    """
    words = sum(len(line.words) + 1 for page in document.pages for line in page.lines)
    cost = _WORD_BYTES * words + _PAGE_BYTES * len(document.pages)
    if fmt == "pdf":
        largest = max((page.width * page.height for page in document.pages), default=0)
        cost += 3 * source_bytes + 4 * largest
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
    await budget.acquire(cost)
    try:
        data: bytes = await cpu.run(render_bytes, document, fmt, priority=priority)
    except BaseException:
        budget.release(cost)
        raise
    # The render's charge becomes the output's, never past the budget's total.
    return OutputStream(data, await budget.answer_from(cost, len(data)))


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
