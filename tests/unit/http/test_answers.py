"""`ChargedAnswer`: charged from its making until sent, in chunks, and given back however the
sending ends (issue 37, item 3)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from serving.http.answers import CHUNK_BYTES, charged_json
from serving.scheduling.memory_budget import MemoryBudget


async def _receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def test_an_answer_is_charged_until_its_last_chunk_is_sent() -> None:
    budget = MemoryBudget(10 << 20)
    answer = asyncio.run(charged_json({"text": "x" * (3 * CHUNK_BYTES)}, budget=budget))
    size = len(answer.body)
    assert budget.used_bytes == size
    sent: list[dict[str, Any]] = []
    charged_while_sending: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        charged_while_sending.append(budget.used_bytes)
        sent.append(message)

    asyncio.run(answer({"type": "http"}, _receive, send))
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert b"".join(bodies) == answer_body(size)
    assert all(len(body) <= CHUNK_BYTES for body in bodies)
    assert len(bodies) == 4
    assert [m.get("more_body") for m in sent[1:]] == [True, True, True, False]
    assert set(charged_while_sending) == {size}
    assert budget.used_bytes == 0


def answer_body(size: int) -> bytes:
    body = ('{"text":"' + "x" * (3 * CHUNK_BYTES) + '"}').encode()
    assert len(body) == size
    return body


def test_an_answer_whose_sending_fails_gives_its_charge_back() -> None:
    budget = MemoryBudget(1 << 20)
    answer = asyncio.run(charged_json({"a": 1}, budget=budget))
    assert budget.used_bytes > 0

    async def send(message: dict[str, Any]) -> None:
        raise OSError("gone")

    with pytest.raises(OSError, match="gone"):
        asyncio.run(answer({"type": "http"}, _receive, send))
    assert budget.used_bytes == 0
