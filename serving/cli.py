"""`ocr-serve`: load the config, build the runtime, run Uvicorn (shutting down within the grace)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import resource
import socket
from collections.abc import Mapping
from pathlib import Path

import uvicorn

from serving import tracing
from serving.app import build_app
from serving.config import AppConfig, ServerConfig, describe, load_config
from serving.errors import ConfigError
from serving.http.connections import ConnectionLimits, guarded_h11
from serving.log_config import configure_logging, log_effective_config
from serving.secret_env import take_secrets
from serving.server import GracefulServer, ShutdownPlan
from serving.service.runtime import Runtime
from serving.telemetry import setup_tracing
from serving.workers.sandbox import forbid_inspection, scrubbed_environ, start_resource_tracker

logger = logging.getLogger("serving")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; they override the config file."""
    parser = argparse.ArgumentParser(
        prog="ocr-serve",
        description="Serve OCR over HTTP.",
        epilog="Environment: OCR_CONFIG (the config file), and OCR_<SECTION>__<KEY>=value for "
        'any key, e.g. OCR_SERVER__PORT=9000 or OCR_WORKERS__DEVICES=\'["gpu:0", "cpu"]\' '
        "(values in TOML syntax, else plain strings). Flags > environment > file > defaults.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("OCR_CONFIG"),
        help="config.toml to read (default: $OCR_CONFIG, else built-in defaults)",
    )
    parser.add_argument("--host", help="bind address (overrides server.host)")
    parser.add_argument("--port", type=int, help="port (overrides server.port)")
    parser.add_argument("--log-level", help="overrides server.log_level")
    return parser.parse_args(argv)


def resolve_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> AppConfig:
    """The config: defaults < file < `OCR_<SECTION>__<KEY>` variables (`environ`, default
    `os.environ`) < command-line flags."""
    import dataclasses

    environ = os.environ if environ is None else environ
    config = load_config(Path(args.config) if args.config else None, environ)
    server = config.server
    changes = {
        key: value
        for key, value in (("host", args.host), ("port", args.port), ("log_level", args.log_level))
        if value is not None
    }
    if changes:
        config = dataclasses.replace(config, server=dataclasses.replace(server, **changes))
    return config


def main(argv: list[str] | None = None, *, backend: str | None = None) -> int:
    """Entry point of `ocr-serve`; `backend` replaces the device workers' engine backend
    (`Runtime.build`: tests serve with fakes)."""
    args = parse_args(argv)
    try:
        config = resolve_config(args)
    except ConfigError as err:
        print(f"ocr-serve: configuration error: {err}")  # noqa: T201
        return 2
    configure_logging(config.server.log_level, log_format=config.server.log_format)
    log_effective_config(logger, describe(config), config.server.log_format)
    if not config.server.inspectable:
        forbid_inspection()  # no same-uid process reads our environment or memory
    secrets = take_secrets(os.environ, config.auth)  # no process started from now on has them
    start_resource_tracker(scrubbed_environ(os.environ))
    try:
        setup_tracing(config.telemetry, process="main")
        runtime = Runtime.build(config, backend=backend)
        app = build_app(runtime, environ=secrets)
    except (ConfigError, ValueError, OSError, RuntimeError) as err:
        logger.error("cannot start: %s", err)
        return 2
    uvicorn_config = uvicorn.Config(
        app,
        host=config.server.host,
        port=config.server.port,
        log_config=None,
        access_log=False,
        # Requests are counted by `serving.http.listeners`, sockets by `serving.http.connections`.
        limit_concurrency=None,
        http=guarded_h11(connection_limits(config.server)),
        ws="none",
        timeout_keep_alive=config.server.keep_alive_timeout_s,  # type: ignore[arg-type]
        server_header=False,  # no `Server: uvicorn` (security_headers.py sets the others)
    )
    server = GracefulServer(
        uvicorn_config,
        plan=ShutdownPlan.within(config.server.shutdown_grace_s),
        abort=runtime.abort_inflight,
    )
    raise_open_files_limit(
        config.server.max_connections
        + (config.server.max_health_connections if config.server.health_port else 0)
    )
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises SIGINT again once stopped
            server.run(sockets=listeners(uvicorn_config, config.server.health_port))
    finally:
        tracing.shutdown()  # the spans still buffered are sent
    return 0


def connection_limits(server: ServerConfig) -> ConnectionLimits:
    """What one socket may cost (`serving.http.connections`)."""
    return ConnectionLimits(
        header_timeout_s=server.header_timeout_s,
        send_idle_timeout_s=server.send_idle_timeout_s,
        send_min_bytes_per_s=server.send_min_bytes_per_s,
        max_connections=server.max_connections,
        max_connections_per_client=server.max_connections_per_client,
        retry_after_s=server.retry_after_s,
        uncounted_port=server.health_port,
        max_uncounted_connections=server.max_health_connections,
    )


def listeners(api: uvicorn.Config, health_port: int) -> list[socket.socket] | None:
    """The API's socket and the probes' own (`server.health_port`) on the same host; None (uvicorn
    binds the API's port itself) when the probes have no port of their own."""
    if not health_port:
        return None
    health = uvicorn.Config(api.app, host=api.host, port=health_port, log_config=None)
    sockets = [api.bind_socket(), health.bind_socket()]
    for sock in sockets:
        sock.set_inheritable(False)
    return sockets


def raise_open_files_limit(connections: int) -> None:
    """Let the process hold `connections` sockets besides its own files: the soft limit on open
    files raised toward the hard one (a container's is often 1024 soft, far more hard)."""
    wanted = connections + 1024 if connections else resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if wanted == resource.RLIM_INFINITY else min(wanted, hard)
    if hard == resource.RLIM_INFINITY:
        target = wanted
    if soft != resource.RLIM_INFINITY and target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if connections and soft != resource.RLIM_INFINITY and soft < connections + 64:
        logger.warning(
            "open files limited to %d: fewer than server.max_connections (%d) can be held",
            soft,
            connections,
        )
