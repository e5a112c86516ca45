"""The soak's traffic: the first requests go one at a time, then the clients overlap."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from loadtest.soak.traffic import ScaledPages, drive


class _Seen:
    """How many requests the server held when each arrived, in arrival order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = 0
        self.at_arrival: list[int] = []


@pytest.fixture
def server() -> Iterator[tuple[str, _Seen]]:
    seen = _Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            with seen.lock:
                seen.held += 1
                seen.at_arrival.append(seen.held)
            time.sleep(0.05)
            with seen.lock:
                seen.held -= 1
            body = b'{"error": {"code": "fake"}}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()


def test_the_lone_requests_go_one_at_a_time_and_then_the_clients_overlap(
    server: tuple[str, _Seen],
) -> None:
    url, seen = server
    pages = ScaledPages([("a", np.full((64, 48, 3), 255, np.uint8))], seed=1)
    result, _, warm_s = asyncio.run(
        drive(url, "v1", pages, concurrency=3, duration_s=1.5, lone_requests=6, progress=False)
    )
    assert seen.at_arrival[:6] == [1] * 6
    assert max(seen.at_arrival[6:]) > 1  # three clients after them
    assert 6 * 0.05 <= warm_s < 1.5  # the warm-up ends with the last lone request
    assert result.requests == len(seen.at_arrival)


def test_without_lone_requests_the_clients_overlap_from_the_start(
    server: tuple[str, _Seen],
) -> None:
    url, seen = server
    pages = ScaledPages([("a", np.full((64, 48, 3), 255, np.uint8))], seed=1)
    _, _, warm_s = asyncio.run(
        drive(url, "v1", pages, concurrency=3, duration_s=0.5, progress=False)
    )
    assert max(seen.at_arrival[:3]) > 1
    assert warm_s == 0.0


def test_a_warmup_counted_in_requests_ends_when_they_are_answered_and_the_span_after_it_holds(
    server: tuple[str, _Seen],
) -> None:
    url, seen = server
    pages = ScaledPages([("a", np.full((64, 48, 3), 255, np.uint8))], seed=1)
    started = time.monotonic()
    result, _, warm_s = asyncio.run(
        drive(
            url,
            "v1",
            pages,
            concurrency=1,
            duration_s=0.6,
            warmup_s=0.1,
            warmup_requests=10,
            progress=False,
        )
    )
    elapsed_s = time.monotonic() - started
    # Ten requests of 0.05 s one after another: the warm-up ends after 0.5 s, not at 0.1 s ...
    assert warm_s >= 10 * 0.05
    # ... and traffic goes on for the 0.5 s judged after it.
    assert elapsed_s >= warm_s + 0.5
    assert result.requests >= 10 + 5
    assert result.requests == len(seen.at_arrival)


def test_a_warmup_shorter_than_its_seconds_ends_at_its_seconds(server: tuple[str, _Seen]) -> None:
    url, _ = server
    pages = ScaledPages([("a", np.full((64, 48, 3), 255, np.uint8))], seed=1)
    _, _, warm_s = asyncio.run(
        drive(
            url,
            "v1",
            pages,
            concurrency=2,
            duration_s=0.6,
            warmup_s=0.3,
            warmup_requests=1,
            progress=False,
        )
    )
    assert warm_s == 0.3
