"""Answers nobody reads, on `ocr-serve` (issue 37, item 3): an `/ocr` answer with its pictures is
charged to the memory budget until it is sent, and a client that never reads it is disconnected
after `server.send_idle_timeout_s`, which gives the charge back; others are served meanwhile."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import time

import httpx
import numpy as np
import pytest

from tests import images
from tests.e2e.conftest import Server

# Model-free, `server.send_idle_timeout_s = 2.0`, pictures up to 4 MiB (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("fake")
MIB = 1 << 20


def _budget_used(server: Server) -> int:
    ready = httpx.get(f"{server.url}/readyz", timeout=30).json()
    used: int = ready["memory_budget"]["used_bytes"]
    return used


def _noise_jpeg(quality: int) -> bytes:
    """A 2000 x 2000 page of noise, which JPEG cannot make small."""
    noise = np.random.default_rng(0).integers(0, 256, (2000, 2000, 3), dtype=np.uint8)
    return images.encode_jpeg(noise, quality=quality)


def _post_unread(server: Server, path: str, content_type: str, body: bytes) -> socket.socket:
    """Post from a socket with a 4 KiB receive window, and read nothing of the answer."""
    host, port = server.url.removeprefix("http://").split(":")
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
    reader.settimeout(120)
    reader.connect((host, int(port)))
    reader.sendall(
        (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    return reader


def _answer_length(reader: socket.socket) -> int:
    """The answer's Content-Length, peeked at once it is made (nothing is taken)."""
    head = reader.recv(4096, socket.MSG_PEEK)
    assert head.startswith(b"HTTP/1.1 200 "), head
    return int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])


def _served_meanwhile(server: Server) -> None:
    png = images.encode_png(images.latin_lines().image)
    other = httpx.post(
        f"{server.url}/v1/ocr", content=png, headers={"content-type": "image/png"}, timeout=60
    )
    assert other.status_code == 200, other.text


def _dropped_and_uncharged(server: Server, reader: socket.socket, length: int) -> None:
    """The reader took nothing for send_idle_timeout_s: dropped, its charge given back."""
    deadline = time.monotonic() + 60  # a safety net, not a timing claim
    while _budget_used(server) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _budget_used(server) == 0
    received = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := reader.recv(1 << 20):
            received += len(chunk)
    assert received < length  # the connection ended before the answer did


def test_a_client_that_never_reads_is_dropped_and_its_answer_uncharged(server: Server) -> None:
    data = _noise_jpeg(quality=95)
    body = json.dumps(
        {"file": base64.b64encode(data).decode(), "fileType": 1, "visualize": True}
    ).encode()
    with _post_unread(server, "/ocr", "application/json", body) as reader:
        length = _answer_length(reader)
        assert length > 6 * MIB
        # While it is unsent it is charged to the budget (before: nothing was)...
        held = _budget_used(server)
        assert held >= length - 4 * MIB - 64 * 1024, (held, length)
        _served_meanwhile(server)  # ...and the server serves others meanwhile
        _dropped_and_uncharged(server, reader, length)
    assert "send_idle_timeout_s" in server.log.read_text()


def test_a_rendered_answer_nobody_reads_is_dropped(server: Server) -> None:
    """A searchable PDF, charged while streamed: before, held for ever by a client that never
    read it."""
    data = _noise_jpeg(quality=100)
    with _post_unread(server, "/v1/ocr?format=pdf", "image/jpeg", data) as reader:
        length = _answer_length(reader)
        assert length > 6 * MIB
        assert _budget_used(server) > 0
        _served_meanwhile(server)
        _dropped_and_uncharged(server, reader, length)
