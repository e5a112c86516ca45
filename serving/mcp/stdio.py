"""`ocr-mcp`: the server's tools over stdio, for agent hosts that start their MCP servers as a
command (Claude Desktop, IDEs), forwarded to a running server's `/mcp`.

A host starts one `ocr-mcp` per session. Running the OCR in that process would start worker
processes and load the models for each session (seconds, hundreds of MB), with its own queues
outside the server's admission, tenants and job store. Forwarded, it starts in a fraction of a
second and every limit, tenant and job is the server's, as over `/mcp`: one set of tools, one
place that enforces them (paths are read from the server's `mcp.read_folders`, URLs under its
URL rules). The key comes from the environment (`OCR_API_KEY`), never the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

logger = logging.getLogger(__name__)

KEY_ENV = "OCR_API_KEY"
"""The environment variable holding the API key `ocr-mcp` sends as a bearer token."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ocr-mcp",
        description="The OCR server's MCP tools over stdio, forwarded to its /mcp. "
        f"The API key, if the server has keys, in ${KEY_ENV}.",
    )
    parser.add_argument(
        "--server", default="http://127.0.0.1:8000", help="the OCR server's base URL"
    )
    parser.add_argument("--timeout-s", type=float, default=300.0, help="one tool call's limit")
    return parser.parse_args(argv)


def forwarding_server(remote: Client) -> Server[object]:
    """A stdio server whose tools are `remote`'s: listed and called there."""

    async def list_tools(
        ctx: ServerRequestContext[object], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await remote.list_tools(cursor=params.cursor if params else None)

    async def call_tool(
        ctx: ServerRequestContext[object], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            return await remote.call_tool(params.name, params.arguments or {})
        except Exception as err:  # the server unreachable: the call fails, ocr-mcp goes on
            logger.warning("tool %s: %s", params.name, err)
            message = f"the OCR server did not answer: {err}"
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=message)], is_error=True
            )

    return Server("ocr-serving", on_list_tools=list_tools, on_call_tool=call_tool)


class Refused(Exception):
    """The server refused `ocr-mcp` before any tool was asked for."""


async def check_reachable(http: httpx2.AsyncClient, url: str) -> None:
    """Say plainly why the server would refuse every call: a wrong or missing key, or no
    `/mcp` (the SDK's own error says only that the server answered an error).

    Raises:
        Refused: the server answered 401, 403 or 404.
    """
    answer = await http.post(url, json={})
    if answer.status_code in (401, 403, 404):
        try:
            why = answer.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            why = answer.text[:200]
        hint = " (is [mcp] enabled on the server?)" if answer.status_code == 404 else ""
        raise Refused(f"HTTP {answer.status_code}: {why}{hint}")


async def serve(base_url: str, key: str | None, timeout_s: float) -> None:
    """Forward stdio's MCP requests to `base_url`'s `/mcp` until stdin closes.

    Raises:
        Refused: the server refuses this key, or serves no `/mcp`.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = httpx2.Timeout(30.0, read=timeout_s)
    url = f"{base_url.rstrip('/')}/mcp"
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        await check_reachable(http, url)
        await _forward(http, url)


async def _forward(http: httpx2.AsyncClient, url: str) -> None:
    async with Client(streamable_http_client(url, http_client=http)) as remote:
        server = forwarding_server(remote)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `ocr-mcp`."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout carries the protocol
    try:
        anyio.run(serve, args.server, os.environ.get(KEY_ENV) or None, args.timeout_s)
    except KeyboardInterrupt:
        return 0
    except Exception as err:
        why = "; ".join(str(leaf) or type(leaf).__name__ for leaf in _leaves(err))
        print(f"ocr-mcp: {args.server}: {why}", file=sys.stderr)  # noqa: T201
        return 2
    return 0


def _leaves(err: BaseException) -> list[BaseException]:
    """The errors an exception group (the SDK's task groups raise them) is made of."""
    if isinstance(err, BaseExceptionGroup):
        return [leaf for inner in err.exceptions for leaf in _leaves(inner)]
    return [err]


if __name__ == "__main__":
    sys.exit(main())
