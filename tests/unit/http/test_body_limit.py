"""`limit_body` on a bare Starlette app: bodies counted as they arrive, charged to the budget."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from serving.config import AppConfig, ServerConfig
from serving.errors import OcrError
from serving.http.body_limit import RAW, limit_body
from serving.scheduling.memory_budget import MemoryBudget


def _app(budget: MemoryBudget, seen: dict[str, int]) -> Starlette:
    async def handler(request: Request) -> Response:
        try:
            body = await request.body()
        except OcrError as err:
            return JSONResponse({"message": err.message}, status_code=err.http_status)
        seen["held"] = budget.body_bytes
        return JSONResponse({"size": len(body)})

    app = Starlette(routes=[Route("/", limit_body(RAW, handler), methods=["POST"])])
    app.state.services = types.SimpleNamespace(
        config=AppConfig(server=ServerConfig(max_body_bytes=100)), budget=budget
    )
    return app


async def _chunks(count: int, size: int) -> AsyncIterator[bytes]:
    for _ in range(count):
        yield b"x" * size


def _post(app: Starlette, content: bytes | AsyncIterator[bytes]) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/", content=content)

    return asyncio.run(main())


def test_a_body_within_the_cap_is_held_twice_while_the_request_runs() -> None:
    budget = MemoryBudget(1000)
    seen: dict[str, int] = {}
    response = _post(_app(budget, seen), _chunks(4, 25))
    assert response.json() == {"size": 100}
    assert seen["held"] == 200  # the body and its copy
    assert budget.body_bytes == budget.used_bytes == 0
    assert response.headers.get("connection") != "close"


def test_a_chunked_body_past_the_cap_is_413_and_closes_the_connection() -> None:
    budget = MemoryBudget(1000)
    response = _post(_app(budget, {}), _chunks(50, 30))  # no Content-Length
    assert response.status_code == 413
    assert "over the limit of 100 bytes (server.max_body_bytes)" in response.json()["message"]
    assert response.headers["connection"] == "close"
    assert budget.body_bytes == 0


def test_a_declared_length_past_the_cap_is_413_before_any_byte() -> None:
    budget = MemoryBudget(1000)
    response = _post(_app(budget, {}), b"x" * 101)
    assert response.status_code == 413
    assert "Request body of 101 bytes" in response.json()["message"]


def test_a_body_the_budget_could_never_hold_is_413_and_one_with_no_room_now_503() -> None:
    budget = MemoryBudget(300)  # bodies may hold 150: a 100-byte raw body holds 200
    response = _post(_app(budget, {}), _chunks(2, 50))
    assert response.status_code == 413  # could never fit: names the budget
    assert "server.memory_budget_bytes" in response.json()["message"]
    budget = MemoryBudget(1000)
    budget.used_bytes = 900  # pages in flight
    response = _post(_app(budget, {}), _chunks(2, 50))
    assert response.status_code == 503
    assert "memory budget" in response.json()["message"]
    assert budget.used_bytes == 900
