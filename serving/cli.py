"""`ocr-serve`: load the config, build the runtime, run Uvicorn (shutting down within the grace)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import uvicorn

from serving.app import build_app
from serving.config import AppConfig, describe, load_config
from serving.errors import ConfigError
from serving.log_config import configure_logging
from serving.server import GracefulServer, ShutdownPlan
from serving.service.runtime import Runtime

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
    logger.info("effective configuration: %s", json.dumps(describe(config)))
    try:
        runtime = Runtime.build(config, backend=backend)
        app = build_app(runtime)
    except (ConfigError, ValueError, OSError) as err:
        logger.error("cannot start: %s", err)
        return 2
    server = GracefulServer(
        uvicorn.Config(
            app,
            host=config.server.host,
            port=config.server.port,
            log_config=None,
            access_log=False,
            limit_concurrency=config.server.limit_concurrency or None,
            server_header=False,  # no `Server: uvicorn` (security_headers.py sets the others)
        ),
        plan=ShutdownPlan.within(config.server.shutdown_grace_s),
        abort=runtime.abort_inflight,
    )
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises SIGINT again once stopped
        server.run()
    return 0
