"""Request bodies against a real `ocr-serve` (issue 26, items 2, 7 and `limit_concurrency`).

A chunked body (no Content-Length) past its cap gets 413 as soon as the cap is passed, on every
endpoint that reads a body, while the main process holds far less than the body; bodies are
charged to the memory budget (503 when it has no room); idle sockets take none of
`server.limit_concurrency`'s requests.
"""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import LIMITS_CONCURRENCY as CONCURRENCY
from tests.e2e.profiles import LIMITS_MAX_BODY as MAX_BODY

# Model-free; `server.max_body_bytes` and `jobs.max_upload_bytes` MAX_BODY, a 200 MB memory
# budget, `server.limit_concurrency` CONCURRENCY (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("limits")


def _connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _head(path: str, content_type: str, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n{extra}\r\n"
    ).encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _read_answer(sock: socket.socket) -> tuple[bytes, bool]:
    """What the server sent, and whether it then closed the connection (within the socket's
    timeout, a safety net)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        return data, False
    return data, True


def _status_and_message(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    parsed = json.loads(body)
    message = parsed["errorMsg"] if "errorMsg" in parsed else parsed["error"]["message"]
    return int(head.split()[1]), message


def _peak_rss_since_reset(pid: int) -> int:
    """The process's peak RSS (VmHWM) since `_reset_peak_rss`, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _reset_peak_rss(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: the peak restarts at the RSS now


BODY_BYTES = 400_000_000
"""What the chunked uploads below would send: 25 times the cap."""
BOUNDARY = "xyz"
FILE_HEAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
    "Content-Type: image/png\r\n\r\n"
).encode()


MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


@pytest.mark.parametrize(
    ("path", "content_type", "first", "filler", "held"),
    [
        # File parts are spooled to disk past 1 MiB: the process holds a few MB at most.
        ("/v1/ocr", MULTIPART, FILE_HEAD, b"\0", MAX_BODY // 2),
        ("/v1/render", MULTIPART, FILE_HEAD, b"\0", MAX_BODY // 2),
        ("/v1/jobs", MULTIPART, FILE_HEAD, b"\0", MAX_BODY // 2),
        # JSON is read into memory, up to the cap.
        ("/ocr", "application/json", b'{"fileType": 1, "file": "', b"A", 2 * MAX_BODY),
    ],
    ids=["v1-ocr", "v1-render", "v1-jobs", "paddlex-ocr"],
)
def test_chunked_body_past_the_cap_gets_413_without_being_read_whole(
    server: Server, path: str, content_type: str, first: bytes, filler: bytes, held: int
) -> None:
    main = psutil.Process(server.process.pid)
    _reset_peak_rss(main.pid)
    rss_before = main.memory_info().rss
    sock = _connect(server)
    sock.sendall(_head(path, content_type, "Transfer-Encoding: chunked\r\n") + _chunk(first))
    block = filler * 65536
    sent = len(first)
    try:
        while sent < BODY_BYTES:
            sock.sendall(_chunk(block))
            sent += len(block)
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed: the answer is waiting to be read
    answer, closed = _read_answer(sock)
    sock.close()
    status, message = _status_and_message(answer)
    assert status == 413, answer[:300]
    assert closed  # not left open to read (and drop) the rest
    setting = "jobs.max_upload_bytes" if path == "/v1/jobs" else "server.max_body_bytes"
    assert setting in message
    assert sent < BODY_BYTES // 10  # answered once the cap was passed, not at the end
    grown = _peak_rss_since_reset(main.pid) - rss_before
    assert grown < held, f"the main process grew by {grown} bytes"
    png = images.encode_png(images.latin_lines().image)
    ok = httpx.post(f"{server.url}/v1/ocr", content=png, headers={"content-type": "image/png"})
    assert ok.status_code == 200, ok.text


def test_jobs_options_field_over_64_kib_gets_413(server: Server) -> None:
    png = images.encode_png(images.latin_lines().image)
    options = json.dumps({"note": "x" * 70_000})
    response = httpx.post(
        f"{server.url}/v1/jobs",
        files={"file": ("a.png", png, "image/png")},
        data={"options": options},
        timeout=60,
    )
    assert response.status_code == 413, response.text
    assert "64 KiB" in response.json()["error"]["message"]


def _budget(server: Server) -> dict[str, int]:
    memory: dict[str, int] = httpx.get(f"{server.url}/readyz").json()["memory_budget"]
    return memory


def _wait_for_budget(server: Server, at_least: int) -> dict[str, int]:
    deadline = time.monotonic() + 60  # a safety net: the bytes are on their way
    while time.monotonic() < deadline:
        memory = _budget(server)
        if memory["body_bytes"] >= at_least:
            return memory
        time.sleep(0.05)
    raise AssertionError(f"bodies never held {at_least} bytes: {_budget(server)}")


def _hold_raw_body(server: Server, nbytes: int) -> socket.socket:
    """A `/v1/ocr` upload of `MAX_BODY` bytes, `nbytes` of them sent, the rest held back."""
    sock = _connect(server)
    sock.sendall(_head("/v1/ocr", "image/png", f"Content-Length: {MAX_BODY}\r\n"))
    sock.sendall(b"\x89PNG" + b"\0" * (nbytes - 4))
    return sock


def test_bodies_are_charged_to_the_memory_budget(server: Server) -> None:
    bodies_may_hold = _budget(server)["total_bytes"] // 2  # memory_budget.BODY_SHARE
    part = MAX_BODY - 1_000_000
    # Raw bodies held back mid-upload, each held twice (the body and its copy), until what is
    # left for bodies is less than an `/ocr` body of `MAX_BODY` would hold (3 times its size).
    count = max(1, -(-(bodies_may_hold - 3 * MAX_BODY + 1) // (2 * part)))
    held = [_hold_raw_body(server, part) for _ in range(count)]
    try:
        memory = _wait_for_budget(server, 2 * part * count)
        assert memory["used_bytes"] >= memory["body_bytes"] == 2 * part * count
        left = bodies_may_hold - memory["body_bytes"]
        text = left // 3 + 1000  # held 3 times: past what is left, within what bodies may hold
        assert text <= MAX_BODY
        assert 3 * text <= bodies_may_hold
        body = b'{"fileType": 1, "file": "' + b"A" * (text - 30) + b'"}'
        shed = httpx.post(
            f"{server.url}/ocr",
            content=body.ljust(text),
            headers={"content-type": "application/json"},
            timeout=60,
        )
        assert shed.status_code == 503, shed.text
        assert shed.json()["errorCode"] == 503
        assert "memory budget" in shed.json()["errorMsg"]
        assert "Retry-After" in shed.headers
    finally:
        for sock in held:
            sock.close()  # the clients go away: their bodies' room comes back
    deadline = time.monotonic() + 60  # a safety net
    while _budget(server)["body_bytes"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _budget(server)["body_bytes"] == 0
    png = images.encode_png(images.latin_lines().image)
    ok = httpx.post(f"{server.url}/v1/ocr", content=png, headers={"content-type": "image/png"})
    assert ok.status_code == 200, ok.text


def test_idle_connections_take_no_request_slot(server: Server) -> None:
    # `server.limit_concurrency` counts requests, not sockets (issue 37, item 1; before, these
    # made every request get Uvicorn's 503): tests/e2e/test_connections.py holds the rest.
    idle = [_connect(server) for _ in range(2 * CONCURRENCY)]
    try:
        assert httpx.get(f"{server.url}/livez").status_code == 200
        png = images.encode_png(images.latin_lines().image)
        ok = httpx.post(
            f"{server.url}/v1/ocr", content=png, headers={"content-type": "image/png"}, timeout=60
        )
        assert ok.status_code == 200, ok.text
    finally:
        for sock in idle:
            sock.close()
