"""`/mcp`: the tools over streamable HTTP, behind the app's middleware like any route (API keys
as `Authorization: Bearer`, per-key rates, the Host check, request ids, traces).

Stateless and answered as JSON: each POST is one exchange, no session is kept between requests,
so any replica answers any request and one key never reaches another's session.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from serving.config import AppConfig
from serving.mcp.tools import build_server

BASE64_SLACK_BYTES = 64 * 1024
"""What a tool call's JSON holds besides its base64 document."""


class McpEndpoint:
    """The ASGI app of `/mcp`; `run()` for the app's lifespan."""

    def __init__(self, config: AppConfig) -> None:
        self.server = build_server()
        max_bytes = config.server.max_body_bytes
        # Its own Starlette app is not used: `/mcp` is a route of ours, under our middleware,
        # and the tools reach `/v1` through our app (`scope["app"]`).
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            max_request_body_size=4 * (max_bytes // 3 + 1) + BASE64_SLACK_BYTES,
            # The Host and Origin checks are ours (`serving.http.hosts`), as for `/v1`.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.server.session_manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve requests for the block's length (the app's lifespan)."""
        async with self.server.session_manager.run():
            yield
