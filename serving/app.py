"""The Starlette application: routes, and a lifespan that starts and stops the runtime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from serving import openapi, ui
from serving.request_id import RequestIdMiddleware
from serving.routes import ROUTES
from serving.runtime import Runtime

logger = logging.getLogger(__name__)


def build_app(runtime: Runtime) -> Starlette:
    """The HTTP app over a built (not yet started) runtime.

    The runtime starts in the background, so the port answers `/livez` at once and `/readyz`
    turns 200 when every device worker has run its warm-up page.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        starting = asyncio.create_task(runtime.start(), name="runtime-start")
        try:
            yield
        finally:
            if not starting.done():
                starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
            await runtime.stop()

    app = Starlette(
        routes=[*ROUTES, *openapi.ROUTES, *ui.ROUTES],
        middleware=[Middleware(RequestIdMiddleware)],
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    return app
