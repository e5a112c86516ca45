"""Answers held whole in memory (JSON: `/ocr` with its pictures, `/v1/ocr`; `/v1/render`'s PNG),
charged to the memory budget from when they are made until the client has taken them.

Starlette's `JSONResponse` hands the whole body to uvicorn in one message, which the transport
buffers: the endpoint returns at once, and the answer stays in the main process, charged to
nothing, for as long as the client takes to read it, for ever for one that never reads (issue 37,
item 3). `ChargedAnswer` sends it in chunks instead, each after the socket took the last (uvicorn
waits while its buffer is over the high-water mark), so the answer's task lives as long as the
answer is unsent, holding its charge; a client that stops reading is disconnected after
`server.send_idle_timeout_s` (`serving.http.connections`), which ends the task and gives the
charge back; one that reads too slowly (`server.send_min_bytes_per_s`) likewise.

The charge stays within the budget's total (issue 49): an answer waits for room, ahead of the
pages waiting (`MemoryBudget.acquire_answer`), or takes over the charge of the work that made it
(`MemoryBudget.answer_from`: `/v1/render`'s page), where it used to be counted past the total.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serving.scheduling.memory_budget import Held, MemoryBudget

CHUNK_BYTES = 64 * 1024
"""Bytes sent a message: uvicorn's default high-water mark, so at most about this much more
than the socket takes sits in the transport's buffer."""


class ChargedAnswer(Response):
    """A whole answer, its charge (`held`, `len(content)` bytes of the budget) held from its
    making until the client took all of it but the socket's buffers, or went away."""

    def __init__(
        self,
        content: bytes,
        *,
        held: Held,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        super().__init__(content, status_code, headers, media_type, background)
        self._held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            body = memoryview(self.body)
            start = 0
            while True:
                chunk = bytes(body[start : start + CHUNK_BYTES])
                start += CHUNK_BYTES
                more = start < len(body)
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
                if not more:
                    break
        finally:
            self.release()
        if self.background is not None:
            await self.background()

    @property
    def charged_bytes(self) -> int:
        """What the answer holds of the budget now."""
        return self._held.nbytes

    def release(self) -> None:
        """Give the charge back and drop the body (once)."""
        self.body = b""
        self._held.release()


async def charged_json(
    content: Any, *, budget: MemoryBudget, headers: dict[str, str] | None = None
) -> ChargedAnswer:
    """`content` as JSON (as Starlette's `JSONResponse` writes it), charged until sent; waits
    for room in the budget first (ahead of pages).

    Raises:
        PayloadTooLarge: the answer is larger than the whole budget (413).
    """
    body = json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")
    held = await budget.acquire_answer(len(body))
    return ChargedAnswer(body, held=held, headers=headers, media_type="application/json")
