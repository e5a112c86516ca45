"""Slow and stalled uploads against a real `ocr-serve`: a clear 408, the connection closed, and
the server still serving (the shared e2e config sets a 2 s idle and an 8 s total body timeout)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server


def _open(server: Server, path: str, content_type: str, length: int) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    sock.sendall(head.encode())
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, object]]:
    """Status and JSON body of the response; the server must then close the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    ("path", "content_type", "message_of"),
    [
        ("/ocr", "application/json", lambda body: body["errorMsg"]),
        ("/v1/ocr", "image/png", lambda body: body["error"]["message"]),
        ("/v1/jobs", "multipart/form-data; boundary=xyz", lambda body: body["error"]["message"]),
    ],
)
def test_stalled_upload_gets_408(server: Server, path: str, content_type: str, message_of) -> None:
    sock = _open(server, path, content_type, 100_000)
    sock.sendall(b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n')
    status, body = _answer(sock)  # no more bytes: the idle timeout answers
    assert status == 408
    assert "server.upload_idle_timeout_s" in message_of(body)
    png = images.encode_png(images.latin_lines().image)
    ok = httpx.post(f"{server.url}/v1/ocr", content=png, headers={"content-type": "image/png"})
    assert ok.status_code == 200


def test_trickled_upload_gets_408_at_the_total_timeout(server: Server) -> None:
    sock = _open(server, "/v1/ocr", "image/png", 4_000_000)
    started = time.monotonic()
    sock.settimeout(1.0)
    answered = b""
    # 16 KiB a second trips neither the 2 s idle timeout nor the 8 KiB/s minimum rate
    # (server.upload_min_bytes_per_s); the 8 s total one ends it.
    for _ in range(30):
        try:
            sock.sendall(b"\x89" * 16384)
            answered = sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        if answered:
            break
    sock.settimeout(30)
    elapsed_s = time.monotonic() - started
    rest = answered + b"".join(iter(lambda: sock.recv(65536), b""))
    sock.close()
    head, _, body = rest.partition(b"\r\n\r\n")
    assert int(head.split()[1]) == 408, rest[:300]
    assert "server.upload_timeout_s" in json.loads(body)["error"]["message"]
    assert elapsed_s >= 7.0  # not the idle timeout
