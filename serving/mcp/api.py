"""The `/v1` API as the caller of a tool call sees it: each tool call is the `/v1` request it
stands for, sent through the server's own app in process (no socket) with the caller's key,
request id and trace. Every limit, tenant, quota and guard of `/v1` applies as it is, by
construction: a key sees only its own jobs, an open store refuses jobs to the network alike."""

from __future__ import annotations

import json
from typing import Any

import httpx
from mcp.server.mcpserver.exceptions import ToolError
from starlette.requests import Request
from starlette.types import ASGIApp

from serving import request_context, tracing
from serving.http.request_id import HEADER as REQUEST_ID_HEADER

FORWARDED = ("authorization", "x-api-key", "host")
"""The headers of the `/mcp` request that its `/v1` requests carry: who calls, and the Host the
Host check reads."""


class V1:
    """A client of this server's `/v1` for one `/mcp` request (`request`)."""

    def __init__(self, request: Request) -> None:
        app: ASGIApp = request.app
        client = (request.client.host, request.client.port) if request.client else ("", 0)
        headers = {name: value for name, value in request.headers.items() if name in FORWARDED}
        request_id = request_context.current()
        if request_id:
            headers[REQUEST_ID_HEADER] = request_id
        headers.update(tracing.carrier() or {})  # the /v1 request's span is a child of the tool's
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=client),
            base_url=f"http://{request.headers.get('host', 'localhost')}",
            headers=headers,
            timeout=None,  # the server's own deadlines apply
        )

    async def __aenter__(self) -> V1:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def ocr(self, name: str, data: bytes, query: dict[str, str]) -> dict[str, Any]:
        """`POST /v1/ocr` of one document, answered as JSON."""
        answer = await self._client.post(
            "/v1/ocr", params=query, files={"file": (name, data, "application/octet-stream")}
        )
        body: dict[str, Any] = _checked(answer).json()
        return body

    async def submit(self, documents: list[tuple[str, bytes]], options: dict[str, Any]) -> Any:
        """`POST /v1/jobs` of the documents, with the job's options."""
        files = [("file", (name, data, "application/octet-stream")) for name, data in documents]
        fields = {"options": json.dumps(options)} if options else None
        return _checked(await self._client.post("/v1/jobs", files=files, data=fields)).json()

    async def job(self, job_id: str) -> Any:
        """`GET /v1/jobs/{job_id}`."""
        return _checked(await self._client.get(f"/v1/jobs/{job_id}")).json()

    async def job_text(self, job_id: str) -> str:
        """The job's text as finished now (`GET /v1/jobs/{job_id}/results?format=text`)."""
        query = {"format": "text", "follow": "false"}
        return _checked(await self._client.get(f"/v1/jobs/{job_id}/results", params=query)).text


def _checked(answer: httpx.Response) -> httpx.Response:
    """`answer` when it succeeded, else a ToolError with `/v1`'s own status, code and message
    (the tool call answers it as an error result: the server is unharmed)."""
    if answer.status_code < 400:
        return answer
    try:
        error = answer.json()["error"]
        text = f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        text = answer.text[:500]
    raise ToolError(f"{answer.status_code} {text}")
