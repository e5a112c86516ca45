"""The tools: read a document (its text in reading order, optionally each line with its box),
submit a job of documents, and follow a job. Each runs as the `/v1` request it stands for
(`serving.mcp.api`), so its errors are `/v1`'s, answered as the tool's error result."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field
from starlette.requests import Request

from serving.errors import OcrError
from serving.http.endpoints import budget_of, config_of
from serving.mcp.api import V1
from serving.mcp.sources import Document, read_source
from serving.scheduling.memory_budget import BodyCharge

INSTRUCTIONS = """OCR of images (PNG, JPEG, TIFF, ...) and PDFs. `read_document` answers a
document's text in reading order at once (a few pages); for many pages, `submit_job` then
`get_job` with `wait_s`. A document is a file path in the server's readable folders, an http(s)
URL the server may fetch, or the file itself in base64."""

MAX_WAIT_S = 60.0
"""The longest `get_job` waits for a job to end, per call."""
WAIT_STEP_S = 0.5

Option = str | int | float | bool


class Line(BaseModel):
    """One text line: its text, confidence and box (four corners, page pixels)."""

    text: str
    score: float
    box: list[list[float]]


class Page(BaseModel):
    """One page's text in reading order (lines of a block together, a blank line between
    blocks), and its lines when asked."""

    page: int
    text: str
    lines: list[Line] | None = None


class Reading(BaseModel):
    """A document's text, its pages apart by a form feed, and each page."""

    text: str
    pages: list[Page]


class Source(BaseModel):
    """One document: exactly one of `path`, `url` or `base64`."""

    path: str | None = Field(None, description="absolute path in the server's readable folders")
    url: str | None = Field(None, description="http(s) URL the server may fetch")
    base64: str | None = Field(None, description="the file itself, base64")
    filename: str | None = Field(
        None, description="its name in the answers (default: from the source)"
    )


def build_server() -> MCPServer:
    """The MCP server and its tools (`/mcp` serves it over streamable HTTP)."""
    server = MCPServer("ocr-serving", instructions=INSTRUCTIONS)

    @server.tool()
    async def read_document(
        ctx: Context,
        path: str | None = None,
        url: str | None = None,
        base64: str | None = None,
        filename: str | None = None,
        lines: bool = False,
        options: dict[str, Option] | None = None,
    ) -> Reading:
        """Read an image or a PDF: its text in reading order, and each line with its box when
        `lines`. Give exactly one of `path`, `url` or `base64`. `options` are `/v1/ocr`'s
        (`lang`, `det_thresh`, ...)."""
        request = _request(ctx)
        query = {"layout": "true", **{k: _query_value(v) for k, v in (options or {}).items()}}
        charge = BodyCharge(budget_of(request), copies=2)
        try:
            document = await _read(request, path, url, base64, filename, charge)
            async with V1(request) as api:
                answer = await api.ocr(document.name, document.data, query)
        finally:
            charge.release()
        return reading(answer, with_lines=lines)

    @server.tool()
    async def submit_job(
        ctx: Context, documents: list[Source], options: dict[str, Option] | None = None
    ) -> dict[str, Any]:
        """Submit documents as one batch job (many pages, read in the background); answers the
        job's id and page count. Follow it with `get_job`."""
        request = _request(ctx)
        if not documents:
            raise ToolError("give at least one document")
        read = [await _read(request, d.path, d.url, d.base64, d.filename, None) for d in documents]
        async with V1(request) as api:
            answer: dict[str, Any] = await api.submit(
                [(d.name, d.data) for d in read], dict(options or {})
            )
        return answer

    @server.tool()
    async def get_job(
        ctx: Context, job_id: str, wait_s: float = 0.0, text: bool = True
    ) -> dict[str, Any]:
        """A job's status and counts; waits up to `wait_s` seconds (at most 60) for it to end.
        Once it has ended, its text too (documents in order, pages apart by a form feed) unless
        `text` is false."""
        if not 0 <= wait_s <= MAX_WAIT_S:
            raise ToolError(f"wait_s must be between 0 and {MAX_WAIT_S:g}")
        request = _request(ctx)
        deadline = time.monotonic() + wait_s
        async with V1(request) as api:
            info: dict[str, Any] = await api.job(job_id)
            while info.get("finished_at") is None and time.monotonic() < deadline:
                await asyncio.sleep(min(WAIT_STEP_S, max(0.0, deadline - time.monotonic())))
                info = await api.job(job_id)
            if text and info.get("finished_at") is not None:
                info["text"] = await api.job_text(job_id)
        return info

    return server


def reading(answer: dict[str, Any], *, with_lines: bool) -> Reading:
    """`/v1/ocr?layout=true`'s answer as text in reading order: each block's lines, a blank line
    between blocks (as `?format=text` writes a page)."""
    pages = []
    for page in answer["pages"]:
        found = page["lines"]
        blocks = page.get("blocks") or [{"lines": list(range(len(found)))}]
        text = "\n\n".join("\n".join(found[i]["text"] for i in b["lines"]) for b in blocks)
        lines = [Line(**line) for line in found] if with_lines else None
        pages.append(Page(page=page["page"], text=text, lines=lines))
    return Reading(text="\f".join(page.text for page in pages), pages=pages)


def _request(ctx: Context) -> Request:
    """The `/mcp` HTTP request a tool call came in."""
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise ToolError("this tool runs over HTTP only")
    return request


async def _read(
    request: Request,
    path: str | None,
    url: str | None,
    data: str | None,
    filename: str | None,
    charge: BodyCharge | None,
) -> Document:
    try:
        return await read_source(
            config_of(request), path=path, url=url, data=data, filename=filename, charge=charge
        )
    except OcrError as err:
        raise ToolError(f"{err.http_status} {err.code}: {err.message}") from err


def _query_value(value: Option) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
