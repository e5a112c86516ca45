"""`ocr-serve` started as a subprocess on a free port, with the real embedded models."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from serving.workers import shm

CONFIG = """
[server]
max_body_bytes = 8000000
log_level = "info"
upload_idle_timeout_s = 2.0
upload_timeout_s = 8.0
[input]
max_pdf_pages = 3
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 2
# One device worker (the default is two): these tests are about behaviour, and one keeps a 2-core
# machine's start-ups short; test_scheduling runs two.
cpu_instances = 1
[workers.rec_queue]
# One CPU device is always busy, so rec chunks of different requests meet only if they wait
# about one detection run; the worker runs detection meanwhile.
max_wait_ms = 1000.0
"""


ONE_WORKER = """
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 1
cpu_instances = 1
"""
"""One CPU worker and one device worker, on the CPU, and no visualize images: the small servers'
config (model-free fakes, one-request checks). Put a `[server]` table before it, others after."""


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SLOW_FAKE = "tests.fakes.predictors:SLOW_FAKE"
"""Model-free device workers, slowed by OCR_FAKE_LATENCY_S (`start_server(backend=...)`)."""


@functools.cache
def precision_checked(environ: tuple[tuple[str, str], ...]) -> None:
    """This CPU's precision check for the default config's model sets, measured once, before the
    first real-model server, by `python -m serving.engine.precision_ahead` (a process of its
    own: the check's models leave with it), its verdicts cached in the project's
    `var/precision`, where every server started here reads them: a cold check of both sets in a
    worker took past the 600 s start-up limit on this 2-core machine shared with other work
    (issue 46). Nothing to do where the environment forces a precision that needs no check."""
    subprocess.run(
        [sys.executable, "-m", "serving.engine.precision_ahead"],
        env=dict(environ),
        cwd=Path(__file__).parents[2],
        stdout=subprocess.DEVNULL,
        check=True,
    )


def start_server(
    tmp: Path,
    config: str = CONFIG,
    *,
    backend: str | None = None,
    env: dict[str, str] | None = None,
) -> Server:
    if backend is None:
        precision_checked(tuple(sorted({**os.environ, **(env or {})}.items())))
    config_path = tmp / "config.toml"
    config_path.write_text(config)
    port = free_port()
    log = tmp / "server.log"
    command = [sys.executable, "-m", "serving"]
    if backend is not None:  # `ocr-serve` itself, on another engine backend
        command = [
            sys.executable,
            "-c",
            "import sys; from serving.cli import main; "
            f"sys.exit(main(sys.argv[1:], backend={backend!r}))",
        ]
    with log.open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [*command, "--config", str(config_path), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=Path(__file__).parents[2],  # the repository: `tests.fakes` imports
        )
    return Server(url=f"http://127.0.0.1:{port}", process=process, log=log)


@contextlib.contextmanager
def serving(tmp: Path, config: str = CONFIG, **kwargs: Any) -> Iterator[Server]:
    """`start_server(tmp, config, **kwargs)`, ready (`wait_ready`), stopped on the way out."""
    srv = start_server(tmp, config, **kwargs)
    try:
        wait_ready(srv)
        yield srv
    finally:
        stop_server(srv)


def wait_ready(server: Server, timeout_s: float = 300.0) -> list[int]:
    """Wait for /readyz; returns the status codes seen on the way."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"ocr-serve exited:\n{server.log.read_text()[-3000:]}")
        try:
            status = httpx.get(f"{server.url}/readyz", timeout=5).status_code
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        seen.append(status)
        if status == 200:
            return seen
        time.sleep(0.2)
    raise TimeoutError(server.log.read_text()[-3000:])


def stop_server(server: Server) -> int:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            return server.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.process.kill()
    return server.process.wait()


def kill_leftovers(server: Server, children: list[psutil.Process]) -> None:
    """Stop what a kill -9 of the main process leaves: its workers and shared memory."""
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait(timeout=30)
    # Workers exit when their parent's pipes close; the resource tracker then unlinks the pool's
    # semaphores, so it is left to finish.
    _gone, alive = psutil.wait_procs(children, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            if "resource_tracker" not in " ".join(proc.cmdline()):
                proc.kill()
    _gone, alive = psutil.wait_procs(alive, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    shm.sweep(shm.server_prefix(server.process.pid))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("serve"))
    try:
        srv.readiness = wait_ready(srv)  # type: ignore[attr-defined]
        yield srv
    finally:
        stop_server(srv)
