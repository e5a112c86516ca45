"""Slow clients against a real `ocr-serve` (issue 49; model-free device workers): a client that
reads its answer, but too slowly, is dropped and its charge given back; `/v1/render`'s PNG is
charged to the memory budget until sent."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests import images
from tests.e2e.conftest import ONE_WORKER, SLOW_FAKE, Server, serving

MIB = 1 << 20
CONFIG = (
    f"""
[server]
log_level = "info"
max_body_bytes = {32 * MIB}
send_idle_timeout_s = 1.0
send_min_bytes_per_s = {512 * 1024}
"""
    + ONE_WORKER
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("slow-clients"), CONFIG, backend=SLOW_FAKE) as srv:
        yield srv


def _budget_used(server: Server) -> int:
    used: int = httpx.get(f"{server.url}/readyz", timeout=30).json()["memory_budget"]["used_bytes"]
    return used


def _post(server: Server, path: str, content_type: str, body: bytes) -> socket.socket:
    """Post from a socket with a 4 KiB receive window; the answer is left to the caller."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
    sock.settimeout(60)
    sock.connect((host, int(port)))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def _noise_png(side: int) -> bytes:
    """A page of noise, which PNG cannot make small (~3 bytes a pixel)."""
    noise = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    return images.encode_png(noise)


def test_a_slow_reader_is_dropped_and_a_render_is_charged_until_sent(server: Server) -> None:
    """A client taking 16 KiB every 0.1 s (160 KiB/s, under the 512 KiB/s minimum) is dropped
    within a few looks; before, one that took any byte within `send_idle_timeout_s` kept its
    answer for as long as it liked, and `/v1/render`'s PNG was not charged at all."""
    png = _noise_png(2000)
    fast = httpx.post(
        f"{server.url}/v1/render", content=png, headers={"content-type": "image/png"}, timeout=60
    )
    assert fast.status_code == 200, fast.text
    length = len(fast.content)
    assert length > 8 * MIB  # more than the sockets' buffers take
    assert _budget_used(server) == 0  # a reader that keeps up is never dropped, nothing kept

    with _post(server, "/v1/render", "image/png", png) as reader:
        head = reader.recv(4096, socket.MSG_PEEK)
        assert head.startswith(b"HTTP/1.1 200 "), head
        started = time.monotonic()
        charged = _budget_used(server)
        assert charged >= length - 6 * MIB, (charged, length)  # before: 0
        received = 0
        with contextlib.suppress(ConnectionResetError):
            while chunk := reader.recv(16384):
                received += len(chunk)
                time.sleep(0.1)
        dropped_after_s = time.monotonic() - started
    assert received < length  # the server ended the connection before the answer did
    assert dropped_after_s < 15, dropped_after_s  # before: ~60 s at this pace, the whole answer
    deadline = time.monotonic() + 10
    while _budget_used(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _budget_used(server) == 0
    assert "server.send_min_bytes_per_s" in server.log.read_text()
