"""Idle connections against a real `ocr-serve` (issue 37, item 1).

Before, Uvicorn's h11 protocol armed no timer until a request head arrived and its
`limit_concurrency` counted sockets: 700 silent sockets and 100 holding half a request line made
every later request, the probes included, get 503, and none was ever closed. Now a socket must send
a whole head within `server.header_timeout_s`, one address may hold only
`server.max_connections_per_client` sockets, `server.limit_concurrency` counts requests, and the
probes have a listener of their own (`server.health_port`). An answer given before the request's
end is followed by a lingering close (item 12), so that a client still uploading reads it. At
`server.max_connections`, idle sockets make room for new ones (issue 49, item 5).
"""

from __future__ import annotations

import base64
import select
import selectors
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests import images
from tests.e2e.conftest import (
    ONE_WORKER,
    SLOW_FAKE,
    Server,
    free_port,
    fresh_server,
    stop_server,
    wait_ready,
)

HEADER_TIMEOUT_S = 3.0
PER_CLIENT = 150
MAX_CONNECTIONS = 10 * PER_CLIENT
LATENCY_S = 1.5
"""Each fake batch's time: an OCR request takes a few seconds, long enough to be caught running."""
PNG = images.encode_png(images.latin_lines().image)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("connections")
    health_port = free_port()
    config = f"""
[server]
max_body_bytes = 16000000
header_timeout_s = {HEADER_TIMEOUT_S}
max_connections = {MAX_CONNECTIONS}
max_connections_per_client = {PER_CLIENT}
limit_concurrency = 2
health_port = {health_port}
{ONE_WORKER}"""
    srv = fresh_server(tmp, config, backend=SLOW_FAKE, env={"OCR_FAKE_LATENCY_S": str(LATENCY_S)})
    srv.health_url = f"http://127.0.0.1:{health_port}"  # type: ignore[attr-defined]
    try:
        wait_ready(srv)
        yield srv
    finally:
        stop_server(srv)


def _port(server: Server) -> int:
    return int(server.url.rpartition(":")[2])


def _connect(server: Server, source: str, send: bytes = b"") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", _port(server)))
    if send:
        sock.sendall(send)
    return sock


def _client(source: str) -> httpx.Client:
    """A client from its own loopback address (Linux answers all of 127.0.0.0/8)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=60)


def _wait_closed(socks: list[socket.socket], within_s: float) -> dict[socket.socket, bytes]:
    """What each socket received until the server closed it; raises if some stay open."""
    received = dict.fromkeys(socks, b"")
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ, data=sock)
    deadline = time.monotonic() + within_s
    open_left = len(socks)
    while open_left and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
            sock = key.data
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if data:
                received[sock] += data
                continue
            selector.unregister(sock)
            open_left -= 1
    selector.close()
    assert open_left == 0, f"{open_left} of {len(socks)} sockets still open after {within_s} s"
    return received


def test_silent_sockets_take_no_slot_and_are_closed_within_the_header_timeout(
    server: Server,
) -> None:
    # 600 silent sockets and 100 with half a request line, 70 from each of 10 addresses (under
    # the per-address cap: this is about the timers).
    silent: list[socket.socket] = []
    half: list[socket.socket] = []
    try:
        for i in range(700):
            source = f"127.0.0.{10 + i % 10}"
            if i % 7 == 0:
                half.append(_connect(server, source, b"GET /livez HT"))
            else:
                silent.append(_connect(server, source))
        opened = time.monotonic()
        with _client("127.0.0.50") as client:
            assert client.get(f"{server.url}/livez").status_code == 200
            answer = client.post(
                f"{server.url}/v1/ocr", content=PNG, headers={"content-type": "image/png"}
            )
            assert answer.status_code == 200, answer.text
        left_s = HEADER_TIMEOUT_S + 5 - (time.monotonic() - opened)
        received = _wait_closed(silent + half, within_s=max(left_s, 1.0))
        assert time.monotonic() - opened >= HEADER_TIMEOUT_S - 0.5  # not before the timeout
        assert all(received[sock] == b"" for sock in silent)  # closed without a word
        for sock in half:
            assert received[sock].startswith(b"HTTP/1.1 408 "), received[sock][:80]
            assert b"server.header_timeout_s" in received[sock]
    finally:
        for sock in silent + half:
            sock.close()


def test_an_idle_keep_alive_connection_is_closed_and_a_trickled_head_too(server: Server) -> None:
    sock = _connect(server, "127.0.0.60", b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
    trickle = _connect(server, "127.0.0.60")
    try:
        started = time.monotonic()
        for byte in b"GET /livez HTTP/1.1\r\nHost: localhost\r\n":  # each byte restarts nothing
            if select.select([trickle], [], [], 0.2)[0]:  # answered: the head's time is up
                break
            trickle.sendall(bytes([byte]))
        received = _wait_closed([sock, trickle], within_s=HEADER_TIMEOUT_S + 5)
        assert received[sock].startswith(b"HTTP/1.1 200 ")  # answered, then closed when idle
        assert received[trickle].startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - started < HEADER_TIMEOUT_S + 3
    finally:
        sock.close()
        trickle.close()


def test_one_address_holds_at_most_its_share_of_connections(server: Server) -> None:
    held = [_connect(server, "127.0.0.70") for _ in range(PER_CLIENT)]
    try:
        extra = _connect(server, "127.0.0.70")
        received = _wait_closed([extra], within_s=5)[extra]
        assert received.startswith(b"HTTP/1.1 503 "), received[:80]
        assert b"retry-after: " in received.lower()
        assert b"server.max_connections_per_client" in received
        extra.close()
        with _client("127.0.0.71") as client:  # another address is served
            assert client.get(f"{server.url}/livez").status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_requests_past_limit_concurrency_get_503_while_the_probes_answer(server: Server) -> None:
    health = server.health_url  # type: ignore[attr-defined]
    answers: list[httpx.Response] = []

    def ocr(source: str) -> None:
        with _client(source) as client:
            answers.append(
                client.post(
                    f"{server.url}/v1/ocr", content=PNG, headers={"content-type": "image/png"}
                )
            )

    running = [threading.Thread(target=ocr, args=(f"127.0.0.{80 + i}",)) for i in range(2)]
    for thread in running:
        thread.start()
    time.sleep(1.0)  # both sent and running: each takes two fake batches of LATENCY_S
    try:
        deadline = time.monotonic() + 30
        refused = None
        with _client("127.0.0.90") as client:
            while time.monotonic() < deadline and len(answers) < 2:
                third = client.post(
                    f"{server.url}/ocr",
                    json={"file": base64.b64encode(PNG).decode(), "fileType": 1},
                )
                if third.status_code == 503:
                    refused = third
                    break
            assert refused is not None, "the third request was never refused"
            assert refused.headers["retry-after"]
            assert refused.json()["errorCode"] == 503  # PaddleX's envelope on /ocr
            assert "server.limit_concurrency" in refused.json()["errorMsg"]
            # The probes answer on both ports; the health port answers nothing else.
            assert client.get(f"{server.url}/livez").status_code == 200
            assert client.get(f"{health}/livez").status_code == 200
            assert client.get(f"{health}/readyz").status_code == 200
            assert client.get(f"{health}/health").status_code == 200
            other = client.post(f"{health}/v1/ocr", content=PNG)
            assert other.status_code == 404
            assert other.json()["error"]["code"] == "not_found"
    finally:
        for thread in running:
            thread.join(timeout=120)
    assert [answer.status_code for answer in answers] == [200, 200]


def test_at_the_cap_idle_sockets_make_room_for_a_whole_request(server: Server) -> None:
    """max_connections sockets from 10 addresses (each at its cap), silent or with half a head:
    a client with a whole request is served, the oldest idle socket closed for it (issue 49,
    item 5: before, it got 503 like an idle one, window after window); the health port's
    sockets are not counted."""
    held = [
        _connect(server, f"127.0.1.{i % 10}", b"GET /livez HT" if i % 2 == 0 else b"")
        for i in range(MAX_CONNECTIONS)
    ]
    try:
        with _client("127.0.1.100") as client:
            answer = client.get(f"{server.url}/livez")
            assert answer.status_code == 200, answer.text
            answer = client.post(
                f"{server.url}/v1/ocr", content=PNG, headers={"content-type": "image/png"}
            )
            assert answer.status_code == 200, answer.text
        # The oldest, which had sent half a head, was closed for it with a 408 saying why
        # (not the header timeout's).
        received = _wait_closed(held[:1], within_s=2)[held[0]]
        assert received.startswith(b"HTTP/1.1 408 "), received[:80]
        assert b"server.max_connections" in received
        health = server.health_url  # type: ignore[attr-defined]
        with _client("127.0.1.101") as client:
            assert client.get(f"{health}/livez").status_code == 200
            assert client.get(f"{health}/readyz").status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_the_health_port_holds_its_own_few_sockets(server: Server) -> None:
    """Issue 49: its sockets counted against no cap at all (nor in the open-files limit): one
    client could hold any number there. Now 64 (server.max_health_connections)."""
    health = server.health_url  # type: ignore[attr-defined]
    port = int(health.rpartition(":")[2])

    def probe_socket() -> socket.socket:
        sock = socket.socket()
        sock.connect(("127.0.0.1", port))
        return sock

    held = [probe_socket() for _ in range(64)]
    try:
        extra = probe_socket()
        started = time.monotonic()
        _wait_closed([extra], within_s=HEADER_TIMEOUT_S - 1)  # before: open until the timeout
        assert time.monotonic() - started < 1.5
        extra.close()
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.5)
    with _client("127.0.1.102") as client:
        assert client.get(f"{health}/livez").status_code == 200


def test_a_client_still_uploading_reads_its_413_not_a_reset(server: Server) -> None:
    # As most clients do: the whole body sent, then the answer read. Refused at once (its declared
    # size), the rest is read and dropped before the close; a plain close with unread bytes sent
    # a reset, which discarded the 413 from the client's buffer.
    size = 64 * 1024 * 1024
    head = (
        "POST /v1/ocr HTTP/1.1\r\nHost: localhost\r\nContent-Type: image/png\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    sock = _connect(server, "127.0.0.110", head.encode())
    sock.settimeout(30)
    chunk = b"\0" * (1 << 20)
    sent = 0
    try:
        while sent < size:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    received, error = b"", None
    try:
        while part := sock.recv(65536):
            received += part
    except OSError as err:
        error = err
    finally:
        sock.close()
    assert received.startswith(b"HTTP/1.1 413 "), (error, sent, received[:80])
    assert b"server.max_body_bytes" in received
    assert sent == size  # the server read (and dropped) the body it had refused
