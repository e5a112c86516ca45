"""The MCP tools on `ocr-serve` (model-free backend: the tools' plumbing, keys and limits are what
is tested, not the models), through the official SDK's own client: over streamable HTTP at
`/mcp` with API keys as bearer tokens, and over stdio through `ocr-mcp` (`python -m
serving.mcp`). A tool answers what `/v1` answers; a key sees only its own jobs; a malformed
call gets an error result and the server goes on serving."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from serving.http.keys import hash_key
from tests import images
from tests.e2e.conftest import ONE_WORKER, Server, fresh_serving

pytestmark = pytest.mark.e2e

KEYS = {"alice": "alice-7f3b9c2e5d1a8f04", "bob": "bob-2c6e8a1f9d3b5e70"}
PNG = images.encode_png(images.latin_lines().image)
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("mcp")
    keys = tmp / "keys.toml"
    keys.write_text(
        "".join(f'[[keys]]\nid = "{name}"\nsha256 = "{hash_key(k)}"\n' for name, k in KEYS.items())
    )
    (tmp / "docs").mkdir()
    (tmp / "docs" / "page.png").write_bytes(PNG)
    (tmp / "elsewhere.png").write_bytes(PNG)
    config = f"""
[auth]
keys_file = "{keys}"
[mcp]
enabled = true
read_folders = ["{tmp / "docs"}"]
[jobs]
data_dir = "{tmp / "jobs"}"
{ONE_WORKER}
"""
    with fresh_serving(tmp, config, backend="fake") as srv:
        yield srv


@asynccontextmanager
async def over_http(server: Server, key: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client,
    ):
        yield client


def over_stdio(server: Server, key: str) -> Client:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "serving.mcp", "--server", server.url],
        env={"OCR_API_KEY": key},
        cwd=REPO,
    )
    return Client(command)


def _text_of(server: Server, key: str, data: bytes) -> str:
    answer = httpx.post(
        f"{server.url}/v1/ocr?format=text",
        files={"file": ("page.png", data, "image/png")},
        headers={"X-API-Key": key},
        timeout=60,
    )
    answer.raise_for_status()
    return answer.text.removesuffix("\n")


def _ok(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("read_document", {"base64": "not base64!"}, "base64 does not decode"),
    ("read_document", {}, "exactly one of path, url or base64"),
    ("read_document", {"base64": "AAAA", "url": "http://example.com/a.png"}, "exactly one"),
    ("read_document", {"base64": 7}, "validation error"),
    ("read_document", {"base64": base64.b64encode(b"not an image").decode()}, "422"),
    ("read_document", {"base64": base64.b64encode(PNG).decode(), "options": {"x": 1}}, "422"),
    ("get_job", {"job_id": "0" * 32}, "404"),
    ("get_job", {"job_id": "x", "wait_s": 3600}, "wait_s"),
    ("no_such_tool", {}, "Unknown tool"),
]


def test_the_tools_over_http_answer_what_v1_answers(server: Server, tmp_path: Path) -> None:
    key = KEYS["alice"]
    expected = _text_of(server, key, PNG)
    folder = Path(server.log).parent

    async def run() -> None:
        async with over_http(server, key) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools == {"read_document", "submit_job", "get_job"}
            encoded = base64.b64encode(PNG).decode()
            read = _ok(await client.call_tool("read_document", {"base64": encoded}))
            assert read["text"] == expected
            assert read["pages"][0]["lines"] is None
            lined = _ok(await client.call_tool("read_document", {"base64": encoded, "lines": True}))
            (page,) = lined["pages"]
            assert page["lines"]
            assert all(len(line["box"]) == 4 for line in page["lines"])
            by_path = await client.call_tool(
                "read_document", {"path": str(folder / "docs" / "page.png")}
            )
            assert _ok(by_path)["text"] == expected
            outside = await client.call_tool(
                "read_document", {"path": str(folder / "docs" / ".." / "elsewhere.png")}
            )
            assert "outside the folders" in _error(outside)

    asyncio.run(run())


def test_a_malformed_call_gets_an_error_and_the_server_goes_on(server: Server) -> None:
    async def run() -> None:
        async with over_http(server, KEYS["alice"]) as client:
            for name, arguments, message in MALFORMED:
                assert message in _error(await client.call_tool(name, arguments)), name
            good = await client.call_tool(
                "read_document", {"base64": base64.b64encode(PNG).decode()}
            )
            assert _ok(good)["text"]

    asyncio.run(run())
    assert httpx.get(f"{server.url}/readyz", timeout=10).status_code == 200


def test_mcp_needs_a_key_and_a_key_sees_only_its_jobs(server: Server) -> None:
    refused = httpx.post(f"{server.url}/mcp", json={}, timeout=10)
    assert refused.status_code == 401

    expected = _text_of(server, KEYS["alice"], PNG)

    async def run() -> None:
        encoded = base64.b64encode(PNG).decode()
        async with over_http(server, KEYS["alice"]) as alice:
            job = _ok(
                await alice.call_tool(
                    "submit_job", {"documents": [{"base64": encoded, "filename": "a.png"}]}
                )
            )
            assert job["pages_total"] == 1
            done = _ok(await alice.call_tool("get_job", {"job_id": job["id"], "wait_s": 30}))
            assert done["status"] == "succeeded"
            assert done["owner"] == "alice"
            assert done["text"] == f"{expected}\n\f"  # a job's text: each page ends with \f
        async with over_http(server, KEYS["bob"]) as bob:
            assert "404" in _error(await bob.call_tool("get_job", {"job_id": job["id"]}))

    asyncio.run(run())


def test_ocr_mcp_serves_the_tools_over_stdio(server: Server) -> None:
    key = KEYS["bob"]
    expected = _text_of(server, key, PNG)

    async def run() -> None:
        async with over_stdio(server, key) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools == {"read_document", "submit_job", "get_job"}
            assert "validation error" in _error(
                await client.call_tool("read_document", {"base64": ["not", "a", "string"]})
            )
            assert "Unknown tool" in _error(await client.call_tool("nope", {}))
            read = await client.call_tool(
                "read_document", {"base64": base64.b64encode(PNG).decode()}
            )
            assert _ok(read)["text"] == expected

    asyncio.run(run())


def test_ocr_mcp_with_a_wrong_key_stops_and_says_why(server: Server) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "serving.mcp", "--server", server.url],
        env={**os.environ, "OCR_API_KEY": "not-a-key"},
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    assert "HTTP 401: API key invalid" in ran.stderr, ran.stderr
