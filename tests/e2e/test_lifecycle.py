"""Backpressure, deadlines and graceful shutdown of `ocr-serve`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import httpx

from serving.scheduling.retry_after import MAX_RETRY_AFTER_S
from tests import images
from tests.e2e.conftest import CONFIG, ONE_SET, fresh_server, stop_server, wait_ready

TIGHT = """
[server]
request_timeout_s = 1.0
max_inflight_pages = 2
overload_status = 429
retry_after_s = 7
[workers]
devices = ["cpu"]
cpu_workers = 1
cpu_instances = 1  # one device worker (the CPU's default is two): one load of the models less
[models]
sets = {}  # the default set reads every page here; no second one to load
ori = ""  # nor a page classifier: the pages are upright
"""


async def _post_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:
        return await asyncio.gather(
            *(
                client.post(f"{url}/v1/ocr", content=b, headers={"content-type": "image/png"})
                for b in bodies
            )
        )


def test_shedding_and_deadlines(tmp_path) -> None:
    server = fresh_server(tmp_path, TIGHT)
    try:
        wait_ready(server)
        dense = images.encode_png(images.dense_page().image)
        responses = asyncio.run(_post_all(server.url, [dense] * 6))
        statuses = [r.status_code for r in responses]
        shed = [r for r in responses if r.status_code == 429]
        assert shed, statuses
        # At least the setting, from the pace where known, spread (serving.scheduling.retry_after).
        assert all(7 <= int(r.headers["retry-after"]) <= 2 * MAX_RETRY_AFTER_S for r in shed)
        assert all(r.json()["error"]["code"] == "overloaded" for r in shed)
        # A dense page takes longer than the 1 s deadline on this machine's CPU.
        timed_out = [r for r in responses if r.status_code == 504]
        assert timed_out, statuses
        assert timed_out[0].json()["error"]["code"] == "deadline_exceeded"
        assert set(statuses) <= {200, 429, 504}
        # Expired work is dropped, not left queued, and nothing stays reserved: once the batch
        # already running on the device ends, a small page goes through again.
        small = images.encode_png(images.latin_lines().image)
        statuses = []
        for _ in range(10):
            (again,) = asyncio.run(_post_all(server.url, [small]))
            statuses.append(again.status_code)
            if again.status_code == 200:
                break
            time.sleep(1)
        assert statuses[-1] == 200, statuses
        metrics = httpx.get(f"{server.url}/metrics").text
        for stage in ("det", "rec", "cls"):
            assert f'ocr_queue_depth{{stage="{stage}"}} 0.0' in metrics
        assert 'ocr_requests_total{endpoint="/v1/ocr",status="429"}' in metrics
        assert 'ocr_requests_total{endpoint="/v1/ocr",status="504"}' in metrics
    finally:
        stop_server(server)


def test_sigterm_drains_in_flight_requests(tmp_path) -> None:
    server = fresh_server(tmp_path, CONFIG + ONE_SET)
    try:
        wait_ready(server)
        pages = [images.encode_png(images.latin_lines().image)] * 4

        async def scenario() -> list[httpx.Response]:
            task = asyncio.ensure_future(_post_all(server.url, pages))
            await asyncio.sleep(0.3)  # the requests are accepted and in flight
            server.process.send_signal(signal.SIGTERM)
            return await task

        responses = asyncio.run(scenario())
        assert [r.status_code for r in responses] == [200] * 4
        assert all(r.json()["pages"][0]["lines"] for r in responses)
        assert server.process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        stop_server(server)


def test_client_disconnect_cancels_its_work(server) -> None:
    dense = images.encode_png(images.dense_page().image)
    with contextlib.suppress(httpx.TimeoutException):
        httpx.post(
            f"{server.url}/v1/ocr",
            content=dense,
            headers={"content-type": "image/png"},
            timeout=1.0,
        )
    # The server notices the closed connection, cancels the request and drops its queued work.
    deadline = time.monotonic() + 60
    while True:
        metrics = httpx.get(f"{server.url}/metrics").text
        gone = 'ocr_requests_total{endpoint="/v1/ocr",status="499"}' in metrics
        idle = all(f'ocr_queue_depth{{stage="{s}"}} 0.0' in metrics for s in ("det", "rec"))
        if gone and idle:
            break
        assert time.monotonic() < deadline, metrics
        time.sleep(0.5)
    assert "client went away" in server.log.read_text()
