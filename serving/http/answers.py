"""Answers held whole in memory (JSON: `/ocr` with its pictures, `/v1/ocr`), charged to the memory
budget from when they are made until the client has taken them.

Starlette's `JSONResponse` hands the whole body to uvicorn in one message, which the transport
buffers: the endpoint returns at once, and the answer stays in the main process, charged to
nothing, for as long as the client takes to read it, for ever for one that never reads (issue 37,
item 3). `ChargedAnswer` sends it in chunks instead, each after the socket took the last (uvicorn
waits while its buffer is over the high-water mark), so the answer's task lives as long as the
answer is unsent, holding its charge; a client that stops reading is disconnected after
`server.send_idle_timeout_s` (`serving.http.connections`), which ends the task and gives the
charge back.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serving.scheduling.memory_budget import MemoryBudget

CHUNK_BYTES = 64 * 1024
"""Bytes sent a message: uvicorn's default high-water mark, so at most about this much more
than the socket takes sits in the transport's buffer."""


class ChargedAnswer(Response):
    """A whole answer, charged to `budget` (`MemoryBudget.take_held`) from its making until the
    client took all of it but the socket's buffers, or went away."""

    def __init__(
        self,
        content: bytes,
        *,
        budget: MemoryBudget,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        super().__init__(content, status_code, headers, media_type, background)
        self._budget = budget
        self.charged_bytes = len(self.body)
        budget.take_held(self.charged_bytes)

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

    def release(self) -> None:
        """Give the charge back and drop the body (once)."""
        charged, self.charged_bytes = self.charged_bytes, 0
        self.body = b""
        if charged:
            self._budget.release(charged)


def charged_json(
    content: Any, *, budget: MemoryBudget, headers: dict[str, str] | None = None
) -> ChargedAnswer:
    """`content` as JSON (as Starlette's `JSONResponse` writes it), charged until sent."""
    body = json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")
    return ChargedAnswer(body, budget=budget, headers=headers, media_type="application/json")
