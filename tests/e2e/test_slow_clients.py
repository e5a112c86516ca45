"""Slow and long-lived clients against a real `ocr-serve` (issue 49, items 1 and 4; model-free
device workers, API keys on, a real PostgreSQL job store): a client that reads its answer too
slowly is dropped and its charge given back, `/v1/render`'s PNG is charged until sent, a body
that trickles is refused, a results stream ends after its lifetime and goes on with `?after=`,
each key holds few streams and requests at once, and streams do not poll the database each.

The tests that need jobs to wait stop the device worker (SIGSTOP) and let it go on after."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import psycopg
import pytest

from tests import images
from tests.e2e.conftest import ONE_WORKER, SLOW_FAKE, Server, fresh_serving
from tests.postgres import PostgresServer

MIB = 1 << 20
K1 = "k1-slow-clients-0123456789"
K2 = "k2-slow-clients-0123456789"
CONFIG = (
    f"""
[server]
log_level = "info"
max_body_bytes = {32 * MIB}
send_idle_timeout_s = 1.0
send_min_bytes_per_s = {512 * 1024}
upload_idle_timeout_s = 1.0
upload_min_bytes_per_s = 10000
upload_timeout_s = 30.0
[auth]
max_open_requests = 6
max_open_streams = 4
"""
    + ONE_WORKER
    + """[jobs]
data_dir = "{data_dir}"
store = "{store}"
poll_interval_s = 0.25
follow_max_s = 6.0
"""
)
PNG = images.encode_png(images.latin_lines().image)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("slow-clients")
    config = CONFIG.format(data_dir=tmp / "jobs", store=postgres.database())
    env = {"OCR_API_KEYS": f"{K1},{K2}", "OCR_FAKE_LATENCY_S": "0.1"}
    with fresh_serving(tmp, config, backend=SLOW_FAKE, env=env) as srv:
        yield srv


def _budget_used(server: Server) -> int:
    used: int = httpx.get(f"{server.url}/readyz", timeout=30).json()["memory_budget"]["used_bytes"]
    return used


def _connect(server: Server, *, window: int | None = None) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket()
    if window is not None:  # before connecting: the receive window
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.settimeout(60)
    sock.connect((host, int(port)))
    return sock


def _head(method: str, path: str, content_type: str, length: int, key: str = K1) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {key}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _noise_png(side: int) -> bytes:
    """A page of noise, which PNG cannot make small (~3 bytes a pixel)."""
    noise = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    return images.encode_png(noise)


def test_a_slow_reader_is_dropped_and_a_render_is_charged_until_sent(server: Server) -> None:
    """A client taking 16 KiB every 0.1 s (at most 160 KiB/s, under the 512 KiB/s minimum) is
    dropped within a few looks; before, one that took any byte within `send_idle_timeout_s` kept
    its answer for as long as it liked, and `/v1/render`'s PNG was not charged at all."""
    png = _noise_png(2000)
    fast = httpx.post(
        f"{server.url}/v1/render",
        content=png,
        headers={"content-type": "image/png", "X-API-Key": K1},
        timeout=60,
    )
    assert fast.status_code == 200, fast.text
    length = len(fast.content)
    assert length > 8 * MIB  # more than the sockets' buffers take
    assert _budget_used(server) == 0  # a reader that keeps up is never dropped, nothing kept

    with _connect(server, window=4096) as reader:
        reader.sendall(_head("POST", "/v1/render", "image/png", len(png)) + png)
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
    assert dropped_after_s < 15, dropped_after_s  # at this pace the answer takes over a minute
    deadline = time.monotonic() + 10
    while _budget_used(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _budget_used(server) == 0
    assert "server.send_min_bytes_per_s" in server.log.read_text()


def test_a_trickled_body_is_refused_at_the_minimum_rate(server: Server) -> None:
    """100 bytes every 0.2 s (500 B/s, under 10,000) never stalls for `upload_idle_timeout_s`;
    before, it held its connection until `upload_timeout_s` (30 s here, 600 by default)."""
    with _connect(server) as sock:
        sock.sendall(_head("POST", "/v1/ocr", "image/png", 100_000))
        started = time.monotonic()
        answer = b""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(150):  # 30 s at most
                sock.sendall(b"\0" * 100)
                time.sleep(0.2)
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    answer += sock.recv(65536)
                sock.setblocking(True)
                if answer:
                    break
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"server.upload_min_bytes_per_s" in answer
    assert time.monotonic() - started < 10
    ok = httpx.post(
        f"{server.url}/v1/ocr",
        content=PNG,
        headers={"content-type": "image/png", "X-API-Key": K1},
        timeout=60,
    )
    assert ok.status_code == 200, ok.text


def test_with_keys_on_another_sites_page_is_refused_even_with_the_key(server: Server) -> None:
    """Issue 49: with keys on there was no Origin check, so a proxy that adds the key (the web
    page's way with keys on) served every site's pages with it."""
    port = server.url.rpartition(":")[2]
    headers = {"content-type": "image/png", "X-API-Key": K1}
    cross = httpx.post(
        f"{server.url}/v1/ocr",
        content=PNG,
        headers={**headers, "Origin": "https://evil.example"},
        timeout=60,
    )
    assert cross.status_code == 403, cross.text
    assert cross.json()["error"]["code"] == "cross_origin_refused"
    own = httpx.post(
        f"{server.url}/v1/ocr",
        content=PNG,
        headers={**headers, "Origin": f"http://127.0.0.1:{port}"},
        timeout=60,
    )
    assert own.status_code == 200, own.text


# --- jobs: results streams ---------------------------------------------------------------------


def _device_pid(server: Server) -> int:
    ready = httpx.get(f"{server.url}/readyz", timeout=30).json()  # loopback: the detail
    (worker,) = ready["devices"].values()
    return int(worker["pid"])


@contextlib.contextmanager
def _device_stopped(server: Server) -> Iterator[int]:
    """The device worker stopped (SIGSTOP): job pages wait, nothing fails, until it goes on."""
    pid = _device_pid(server)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


def _submit(server: Server, key: str, pages: int) -> str:
    files = [("file", (f"p{i}.png", PNG, "image/png")) for i in range(pages)]
    answer = httpx.post(
        f"{server.url}/v1/jobs", files=files, headers={"X-API-Key": key}, timeout=60
    )
    assert answer.status_code == 202, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def _status(server: Server, job_id: str, key: str = K1) -> str:
    answer = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers={"X-API-Key": key}, timeout=30)
    status: str = answer.json()["status"]
    return status


class _Stream:
    """A results stream read in a thread: its status, its lines, and when it ended."""

    def __init__(self, server: Server, job_id: str, key: str, query: str = "") -> None:
        self.status: int | None = None
        self.body = b""
        self.lines: list[bytes] = []
        self.ended_at: float | None = None
        self.opened = threading.Event()
        self._client = httpx.Client(timeout=60, headers={"X-API-Key": key})
        url = f"{server.url}/v1/jobs/{job_id}/results{query}"
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()
        assert self.opened.wait(30)

    def _read(self, url: str) -> None:
        try:
            with self._client.stream("GET", url) as answer:
                self.status = answer.status_code
                self.opened.set()
                for line in answer.iter_lines():
                    self.lines.append(line.encode())
                self.body = b"\n".join(self.lines)
        except httpx.HTTPError:
            pass
        finally:
            self.ended_at = time.monotonic()
            self.opened.set()

    def close(self, timeout_s: float = 30) -> None:
        self._thread.join(timeout_s)
        self._client.close()


@contextlib.contextmanager
def _uploading(server: Server) -> Iterator[None]:
    """A `/v1/ocr` upload of K1's on its way (16 KiB every 0.05 s) while inside."""
    sock = _connect(server)
    sock.sendall(_head("POST", "/v1/ocr", "image/png", 16 * MIB))
    done = threading.Event()

    def send() -> None:
        with contextlib.suppress(OSError):
            while not done.is_set():
                sock.sendall(b"\0" * 16384)
                time.sleep(0.05)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(0.3)  # its head has arrived
    try:
        yield
    finally:
        done.set()
        sender.join(10)
        sock.close()


def _xact_commits(postgres: PostgresServer) -> int:
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _commits_over(postgres: PostgresServer, seconds: float) -> int:
    """Transactions committed in the database over `seconds` (its statistics lag about 1 s)."""
    time.sleep(1.2)  # what came before is counted by now
    before = _xact_commits(postgres)
    time.sleep(seconds)
    return _xact_commits(postgres) - before


def test_streams_per_key_are_capped_and_none_polls_the_database(
    server: Server, postgres: PostgresServer
) -> None:
    """Before: any number of follow streams per key, each reading its job from the database
    every `poll_interval_s` over the replica's one connection (8 streams here: 32 transactions
    a second more), and no cap on a key's requests at once."""
    with _device_stopped(server):
        job1, job2 = _submit(server, K1, 2), _submit(server, K2, 2)
        idle = _commits_over(postgres, 2.0)
        streams = [_Stream(server, job1, K1) for _ in range(4)]
        streams += [_Stream(server, job2, K2) for _ in range(4)]
        assert all(s.status == 200 for s in streams), [s.status for s in streams]
        refused = httpx.get(
            f"{server.url}/v1/jobs/{job1}/results", headers={"X-API-Key": K1}, timeout=30
        )
        assert refused.status_code == 429, refused.text
        assert "auth.max_open_streams" in refused.json()["error"]["message"]
        assert "retry-after" in refused.headers
        # One look for all eight streams each poll interval (0.25 s), not one each.
        following = _commits_over(postgres, 2.0)
        assert following - idle < 24, (idle, following)  # before: about 64 more
        # Four streams and two uploads on their way: K1's six requests at once.
        with _uploading(server), _uploading(server):
            over = httpx.get(f"{server.url}/v1/jobs", headers={"X-API-Key": K1}, timeout=30)
            assert over.status_code == 429, over.text
            assert "auth.max_open_requests" in over.json()["error"]["message"]
            other = httpx.get(f"{server.url}/v1/jobs", headers={"X-API-Key": K2}, timeout=30)
            assert other.status_code == 200, other.text
    for stream in streams:
        stream.close()
    assert all(len(s.lines) == 2 for s in streams), [len(s.lines) for s in streams]


def test_a_stream_ends_after_its_lifetime_and_goes_on_where_it_stopped(server: Server) -> None:
    """Before, a follow stream lasted as long as its job, sending nothing while it waited;
    now it ends after `jobs.follow_max_s` (6 s here) and `?after=N` goes on from its N lines."""
    with _device_stopped(server):
        job = _submit(server, K1, 3)
        first = _Stream(server, job, K1)
        opened = time.monotonic()
        first.close(timeout_s=20)
        assert first.status == 200
        assert first.ended_at is not None
        assert first.ended_at - opened < 12  # the lifetime, not the job, ended it
        assert _status(server, job) in ("queued", "running")
        got = len(first.lines)
    rest = _Stream(server, job, K1, f"?after={got}")
    rest.close()
    lines = first.lines + rest.lines
    assert len(lines) == 3
    assert len(set(lines)) == 3  # no page twice
    assert _status(server, job) == "succeeded"
    again = httpx.get(
        f"{server.url}/v1/jobs/{job}/results?follow=false&after=1",
        headers={"X-API-Key": K1},
        timeout=30,
    )
    assert again.status_code == 200
    assert len(again.text.strip().splitlines()) == 2
    text = httpx.get(
        f"{server.url}/v1/jobs/{job}/results?format=text&after=2",
        headers={"X-API-Key": K1},
        timeout=30,
    )
    assert text.text.count("\f") == 1
