"""ocr-loadtest end to end against a fake OCR server on 127.0.0.1, started inside the test."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loadtest.cli import main
from loadtest.documents import load_documents
from loadtest.run import run_level

pytestmark = pytest.mark.integration

PAGES_PER_RESPONSE = 2
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
PDF = b"%PDF-1.4\n%fake\n"


def _kind(data: bytes) -> str:
    return "pdf" if data.startswith(b"%PDF") else "image"


class FakeOcr:
    """Answers after `delay_s`; every 5th request gets a 503; batch sizes go to /metrics."""

    def __init__(self, delay_s: float, *, with_metrics: bool = True) -> None:
        self.delay_s = delay_s
        self.with_metrics = with_metrics
        self.arrivals = 0
        self.registry = CollectorRegistry()
        self.batch_size = Histogram(
            "ocr_batch_size",
            "Rows per call.",
            ["stage", "device"],
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "ocr_queue_wait_seconds", "Queue wait.", ["stage"], registry=self.registry
        )
        for _ in range(3):  # traffic before the run, which the report must not count
            self.batch_size.labels(stage="det", device="cpu").observe(50)

    async def _answer(self, problem: str | None) -> tuple[bool, int]:
        self.arrivals += 1
        number = self.arrivals
        await asyncio.sleep(self.delay_s)
        if problem is not None:
            return False, 400
        if number % 5 == 0:
            return False, 503
        self.batch_size.labels(stage="det", device="cpu").observe(1 + number % 4)
        self.batch_size.labels(stage="rec", device="cpu").observe(8)
        self.queue_wait.labels(stage="det").observe(0.002)
        return True, 200

    async def paddlex(self, request: Request) -> Response:
        problem = None
        try:
            body: dict[str, Any] = await request.json()
            data = base64.b64decode(body["file"], validate=True)
            expected = 0 if _kind(data) == "pdf" else 1
            if body["fileType"] != expected or body.get("visualize") is not False:
                problem = "wrong fileType or visualize"
        except (ValueError, KeyError, TypeError):
            problem = "bad body"
        ok, status = await self._answer(problem)
        if not ok:
            envelope = {"logId": "x", "errorCode": status, "errorMsg": problem or "busy"}
            return JSONResponse(envelope, status_code=status)
        result: dict[str, Any] = {
            "ocrResults": [{"prunedResult": {}}] * PAGES_PER_RESPONSE,
            "dataInfo": {},
        }
        return JSONResponse({"logId": "x", "errorCode": 0, "errorMsg": "Success", "result": result})

    async def v1(self, request: Request) -> Response:
        data = await request.body()
        content_type = request.headers.get("content-type", "")
        expected = "application/pdf" if _kind(data) == "pdf" else "image/png"
        ok, status = await self._answer(None if content_type == expected else "content type")
        if not ok:
            return JSONResponse({"error": {"code": "overloaded"}}, status_code=status)
        return JSONResponse(
            {"pages": [{"page": i, "lines": []} for i in range(PAGES_PER_RESPONSE)]}
        )

    async def metrics(self, request: Request) -> Response:
        if not self.with_metrics:
            return Response(status_code=404)
        return Response(generate_latest(self.registry), media_type="text/plain; version=0.0.4")

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/ocr", self.paddlex, methods=["POST"]),
                Route("/v1/ocr", self.v1, methods=["POST"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )


@dataclass
class Served:
    url: str
    fake: FakeOcr


@contextmanager
def serving(fake: FakeOcr) -> Iterator[Served]:
    # proto must be IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on accepted
    # connections only then, and without it every keep-alive response waits ~40 ms (Nagle
    # against delayed ACK), which would swamp the latencies measured here.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(fake.app(), log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # a sync fixture: nothing else to wait on
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fake server did not start")
        time.sleep(0.01)
    try:
        yield Served(f"http://127.0.0.1:{port}", fake)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def served() -> Iterator[Served]:
    with serving(FakeOcr(delay_s=0.02)) as server:
        yield server


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "a.png").write_bytes(PNG)
    (folder / "b.pdf").write_bytes(PDF)
    return folder


def _report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / "results.json").read_text())
    return report


@pytest.mark.parametrize("api", ["paddlex", "v1"])
def test_closed_loop_levels(
    api: str, served: Served, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["--url", served.url, "--api", api, "--inputs", str(inputs), "--requests", "20"]
    argv += ["--concurrency", "1,4", "--timeout-s", "10", "--max-time-s", "60", "--out", str(out)]
    assert main(argv) == 0

    report = _report(out)
    assert report["command"] == ["ocr-loadtest", *argv]
    assert report["timestamp"]
    levels = report["levels"]
    assert [level["concurrency"] for level in levels] == [1, 4]
    for level in levels:
        assert level["requests"] == 20
        assert level["successes"] + sum(level["errors"].values()) == level["requests"]
        assert level["errors"] == {"http_503": 4}
        assert level["pages"] == level["successes"] * PAGES_PER_RESPONSE
        assert level["throughput_pages_s"] > 0
        assert level["throughput_requests_s"] > 0
        assert 0 < level["p50_s"] <= level["p95_s"] <= level["p99_s"] <= level["max_s"]
        assert level["p50_s"] >= served.fake.delay_s  # latency covers the server's time
        assert not level["truncated"]
        det = level["metrics"]["det"]
        assert det["batches"] == level["successes"]  # the 3 observations before are excluded
        assert 1 <= det["mean_batch_size"] <= 4
        assert sum(det["batch_size_histogram"].values()) == det["batches"]
        assert det["batch_size_histogram"]["64"] == 0
        assert level["metrics"]["rec"]["mean_batch_size"] == 8
        assert level["metrics"]["det"]["mean_queue_wait_s"] == pytest.approx(0.002)
    assert levels[1]["throughput_requests_s"] > levels[0]["throughput_requests_s"]

    for name in ("results.md", "latency_vs_throughput.png", "batch_size_histogram.png"):
        assert (out / name).stat().st_size > 0
    table = (out / "results.md").read_text()
    assert "| c=1 |" in table
    assert "| c=4 |" in table
    stdout = capsys.readouterr().out
    assert stdout.startswith("| level |")
    assert "4 (http_503: 4)" in stdout


def test_open_loop_rates_with_warmup(served: Served, inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--url", served.url, "--api", "v1", "--inputs", str(inputs), "--rate", "40,80"]
    argv += ["--requests", "20", "--warmup", "5", "--seed", "3", "--out", str(out)]
    argv += ["--max-time-s", "60", "--no-progress"]
    assert main(argv) == 0
    levels = _report(out)["levels"]
    assert [level["rate_per_s"] for level in levels] == [40.0, 80.0]
    for level in levels:
        assert level["warmup_requests"] == 5
        assert level["requests"] + level["dropped"] == 20
        assert level["dropped"] == 0
        # 5 warm-up + 20 measured per level: arrivals 6..25 and 31..50 hold four 5th requests.
        assert level["errors"] == {"http_503": 4}
        assert level["metrics"]["det"]["batches"] == level["successes"]


def test_duration_bound_and_missing_metrics(inputs: Path) -> None:
    async def scenario(url: str) -> None:
        docs = load_documents([inputs])
        result = await run_level(url, "paddlex", docs, concurrency=2, duration_s=0.3)
        assert result.requests > 0
        assert result.wall_s < 2.0
        assert result.metrics is None
        assert result.metrics_error is not None

    with serving(FakeOcr(delay_s=0.01, with_metrics=False)) as served:
        asyncio.run(scenario(served.url))


def test_max_time_cuts_a_slow_level(inputs: Path) -> None:
    async def scenario(url: str) -> None:
        docs = load_documents([inputs])
        started = time.monotonic()
        result = await run_level(url, "v1", docs, concurrency=3, requests=10, max_time_s=0.5)
        assert time.monotonic() - started < 3.0
        assert result.truncated
        assert result.cancelled == 3
        assert result.requests == 0

    with serving(FakeOcr(delay_s=1.5)) as served:
        asyncio.run(scenario(served.url))


def test_answers_with_another_text_than_the_reference_are_counted(inputs: Path) -> None:
    """The bench's correct pages/s: each success's text against what the server gave that
    document alone; failures are neither correct nor changed."""

    async def scenario(url: str) -> None:
        docs = load_documents([inputs])  # a.png, b.pdf; the fake reads no lines on either
        reference = [[], ["a line the fake never reads"]]
        result = await run_level(url, "v1", docs, concurrency=1, requests=10, reference=reference)
        # One at a time: request i sends docs[i % 2], and arrivals 5 and 10 get a 503.
        assert result.errors == {"http_503": 2}
        assert result.changed == 4  # b.pdf's 4 answers
        correct_pages = 4 * PAGES_PER_RESPONSE  # a.png's 4 answers
        assert result.correct_pages_s == pytest.approx(correct_pages / result.wall_s)
        plain = await run_level(url, "v1", docs, concurrency=1, requests=2)
        assert (plain.changed, plain.correct_pages_s) == (None, None)

    with serving(FakeOcr(delay_s=0.01)) as served:
        asyncio.run(scenario(served.url))
