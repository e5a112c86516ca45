"""The Starlette application: routes, and a lifespan that starts and stops the runtime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from serving.config import AppConfig
from serving.errors import ConfigError
from serving.http import exceptions, openapi, ui
from serving.http.auth import ApiKeyMiddleware
from serving.http.hosts import HostCheckMiddleware
from serving.http.job_export import JobExporter
from serving.http.key_reload import KeyReloader
from serving.http.keys import load_keys
from serving.http.listeners import ListenerMiddleware
from serving.http.open_requests import OpenRequestsMiddleware
from serving.http.open_store import OpenStoreGuard, is_loopback_bind, store_refused
from serving.http.request_id import RequestIdMiddleware
from serving.http.routes import ROUTES
from serving.http.security_headers import SecurityHeadersMiddleware
from serving.http.trace import TraceMiddleware
from serving.http.upload_timeout import UploadTimeoutMiddleware
from serving.metrics import Metrics
from serving.scheduling.quotas import ClientSlots
from serving.service.runtime import Runtime

if TYPE_CHECKING:
    from serving.mcp.endpoint import McpEndpoint

logger = logging.getLogger(__name__)


def middleware(
    config: AppConfig, environ: Mapping[str, str], metrics: Metrics | None = None
) -> list[Middleware]:
    """Security headers outermost, then (tracing on) each request's span, then request ids, then
    the listeners' routes and the API's requests at once (`serving/http/listeners.py`), then
    upload timeouts, then CORS (only with `server.cors_origins`), then API keys, or with no keys
    the Host check (`serving/http/hosts.py`) and, on a bind beyond loopback without
    `auth.open`, the jobs API refused (`serving/http/open_store.py`).

    CORS sits outside the key check so that browsers' preflight requests, which carry no key,
    are answered.

    Raises:
        ConfigError: an API key file cannot be read or is invalid.
    """
    stack = [
        Middleware(SecurityHeadersMiddleware),
        # Only while tracing is on (`[telemetry]`): off, a request meets nothing of it.
        *([Middleware(TraceMiddleware)] if config.telemetry.enabled else []),
        Middleware(RequestIdMiddleware),
        Middleware(
            ListenerMiddleware,
            max_requests=config.server.limit_concurrency,
            health_port=config.server.health_port,
            retry_after_s=config.server.retry_after_s,
        ),
        Middleware(
            UploadTimeoutMiddleware,
            idle_timeout_s=config.server.upload_idle_timeout_s,
            total_timeout_s=config.server.upload_timeout_s,
            min_bytes_per_s=config.server.upload_min_bytes_per_s,
        ),
    ]
    if config.server.cors_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.server.cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "X-API-Key", "X-Request-ID"],
                expose_headers=["X-Request-ID", "Retry-After"],
            )
        )
    keys = load_keys(config.auth, environ)
    # Inside the key check (a key's id is known), outside everything else.
    open_requests = Middleware(
        OpenRequestsMiddleware,
        slots=ClientSlots(
            config.auth.max_open_requests, setting="auth.max_open_requests", what="requests"
        ),
        retry_after_s=config.server.retry_after_s,
    )
    if not keys:
        logger.info("API keys: none, access is open")
        stack.append(
            Middleware(
                HostCheckMiddleware,
                allowed_hosts=config.server.allowed_hosts,
                cors_origins=config.server.cors_origins,
            )
        )
        if store_refused(config.server.host, open_access=config.auth.open):
            logger.warning(
                "jobs API refused (403 open_store_refused): no API keys and host %s is not "
                "loopback; configure keys, or set auth.open = true to serve it to the network",
                config.server.host,
            )
            stack.append(Middleware(OpenStoreGuard))
        elif not is_loopback_bind(config.server.host):
            logger.warning("jobs API open to the network without keys (auth.open = true)")
        stack.append(open_requests)
        return stack
    admins = sum(key.identity.role == "admin" for key in keys)
    logger.info("API keys: %d configured (%d admin)", len(keys), admins)
    # A proxy that adds the key lends it to any page that reaches it: Origin (and, with names
    # listed, Host) checked with keys on too (`serving/http/hosts.py`).
    stack.append(
        Middleware(
            HostCheckMiddleware,
            allowed_hosts=config.server.allowed_hosts,
            cors_origins=config.server.cors_origins,
            keys_on=True,
        )
    )
    stack.append(
        Middleware(
            ApiKeyMiddleware,
            keys=keys,
            protect_metrics=config.auth.protect_metrics,
            metrics=metrics,
            reloader=KeyReloader(
                lambda: load_keys(config.auth, environ),
                [path for path in (config.auth.api_keys_file, config.auth.keys_file) if path],
            ),
        )
    )
    stack.append(open_requests)
    return stack


def mcp_endpoint(config: AppConfig) -> McpEndpoint | None:
    """`/mcp` when `[mcp] enabled` (`serving.mcp`), else None.

    Raises:
        ConfigError: it is enabled and the `mcp` extra is not installed.
    """
    if not config.mcp.enabled:
        return None
    try:
        from serving.mcp.endpoint import McpEndpoint
    except ImportError as err:
        raise ConfigError("mcp.enabled", f"needs the mcp extra ({err})") from err
    return McpEndpoint(config)


def build_app(runtime: Runtime, environ: Mapping[str, str] | None = None) -> Starlette:
    """The HTTP app over a built (not yet started) runtime.

    The runtime starts in the background, so the port answers `/livez` at once and `/readyz`
    turns 200 when every device worker has run its warm-up page. API keys are read from
    `environ` (default `os.environ`) and the configured key file.

    Raises:
        ConfigError: the API key file cannot be read.
    """

    mcp = mcp_endpoint(runtime.config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runtime.jobs is not None and runtime.jobs.outbox is not None:
            # Exports render the jobs' documents, which the HTTP layer does (`job_documents`).
            runtime.jobs.outbox.exporter = JobExporter(
                app.state.services.jobs, runtime.config.storage, runtime.metrics
            )
        starting = asyncio.create_task(runtime.start(), name="runtime-start")
        try:
            async with contextlib.AsyncExitStack() as stack:
                if mcp is not None:
                    await stack.enter_async_context(mcp.run())
                yield
        finally:
            if not starting.done():
                starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
            await runtime.stop()

    app = Starlette(
        routes=[
            *ROUTES,
            *openapi.ROUTES,
            *ui.ROUTES,
            *([Route("/mcp", mcp)] if mcp is not None else []),
        ],
        middleware=middleware(
            runtime.config, os.environ if environ is None else environ, runtime.metrics
        ),
        lifespan=lifespan,
        exception_handlers=exceptions.EXCEPTION_HANDLERS,  # JSON 404 and 405
    )
    app.state.services = runtime.endpoint_services()  # read by `serving.http.endpoints`
    return app
