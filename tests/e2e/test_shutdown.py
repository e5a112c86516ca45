"""SIGTERM with more work in flight than the shutdown grace allows."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import signal
import time

import httpx

from tests import images
from tests.e2e.conftest import ONE_WORKER, SLOW_FAKE, fresh_server, stop_server, wait_ready

GRACE_S = 3.0
LATENCY_S = 0.5
"""Every fake inference batch takes this long; det runs one page per batch on the CPU device."""
REQUESTS = 6
"""Six pages of det alone take the whole grace, and rec comes after: some requests cannot finish."""

CONFIG = f"""
[server]
shutdown_grace_s = {GRACE_S}
request_timeout_s = 120.0
retry_after_s = 5
log_level = "info"
{ONE_WORKER}"""


async def _post(
    client: httpx.AsyncClient, url: str, page: bytes, *, paddlex: bool
) -> httpx.Response:
    if paddlex:
        body = {"file": base64.b64encode(page).decode(), "fileType": 1}
        return await client.post(f"{url}/ocr", json=body)
    return await client.post(f"{url}/v1/ocr", content=page, headers={"content-type": "image/png"})


def _sample(metrics: str, name: str, stage: str) -> float:
    match = re.search(rf'^{re.escape(name)}{{stage="{stage}"}} (\S+)$', metrics, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def _until_in_flight(
    client: httpx.AsyncClient, url: str, count: int, stage: str = "det"
) -> None:
    """Wait until `count` pages have reached `stage` (queued or run), so the server holds every
    request; no time limit here: the test's own timeout bounds it."""
    while True:
        metrics = (await client.get(f"{url}/metrics")).text
        reached = _sample(metrics, "ocr_queue_depth", stage) + _sample(
            metrics, "ocr_queue_wait_seconds_count", stage
        )
        if reached >= count:
            return
        await asyncio.sleep(0.05)


def test_sigterm_answers_every_request_in_json_and_exits_within_the_grace(tmp_path) -> None:
    server = fresh_server(
        tmp_path,
        CONFIG,
        backend=SLOW_FAKE,
        env={"OCR_FAKE_LATENCY_S": str(LATENCY_S)},
    )
    try:
        wait_ready(server)
        page = images.encode_png(images.latin_lines().image)

        async def scenario() -> tuple[list[httpx.Response], float]:
            async with httpx.AsyncClient(timeout=120) as client:
                posts = [
                    asyncio.ensure_future(_post(client, server.url, page, paddlex=i % 2 == 1))
                    for i in range(REQUESTS)
                ]
                await _until_in_flight(client, server.url, REQUESTS)
                server.process.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                return list(await asyncio.gather(*posts)), signalled

        responses, signalled = asyncio.run(scenario())
        # A bound on the wait, not a speed measurement: the server plans to be gone by GRACE_S.
        exit_code = server.process.wait(timeout=GRACE_S + 10)
        print(f"exit {exit_code} {time.monotonic() - signalled:.2f} s after SIGTERM")  # -s shows it

        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 503}, statuses
        assert 503 in statuses, statuses  # the grace was too short for some
        for index, response in enumerate(responses):
            assert response.headers["content-type"] == "application/json", response.text
            body = response.json()
            paddlex = index % 2 == 1
            if response.status_code == 200:
                assert (body["errorCode"] == 0) if paddlex else body["pages"], body
                continue
            assert 5 <= int(response.headers["retry-after"]) <= 10
            if paddlex:
                assert body["errorCode"] == 503, body
                assert "shutting down" in body["errorMsg"], body
            else:
                assert body["error"]["code"] == "shutting_down", body
        assert exit_code == 0
        log = server.log.read_text()
        assert "Exception in ASGI application" not in log
        assert "Traceback" not in log
    finally:
        stop_server(server)


def test_a_stuck_worker_does_not_hold_the_process_past_the_grace(tmp_path) -> None:
    server = fresh_server(tmp_path, CONFIG, backend=SLOW_FAKE)
    device_pid = None
    try:
        wait_ready(server)
        ready = httpx.get(f"{server.url}/readyz").json()
        device_pid = ready["devices"]["cpu"]["pid"]
        os.kill(device_pid, signal.SIGSTOP)  # stuck in a batch: it never answers, nor stops
        page = images.encode_png(images.latin_lines().image)

        async def scenario() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=120) as client:
                posts = [
                    asyncio.ensure_future(_post(client, server.url, page, paddlex=False))
                    for _ in range(2)
                ]
                # /v1/ocr classifies each page's orientation first (the default), on the
                # stopped worker: the pages wait there, never reaching detection.
                await _until_in_flight(client, server.url, 2, stage="ori")
                server.process.send_signal(signal.SIGTERM)
                return list(await asyncio.gather(*posts))

        responses = asyncio.run(scenario())
        assert [r.status_code for r in responses] == [503, 503]
        # Waiting for the worker to stop would take its 10 s join timeout; the grace ends first.
        assert server.process.wait(timeout=GRACE_S + 5) == 0
        log = server.log.read_text()
        killed = re.search(r"killed \d+ worker processes still running \(pids ([\d, ]+)\)", log)
        assert killed, log
        assert str(device_pid) in killed.group(1).split(", ")
    finally:
        if device_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(device_pid, signal.SIGKILL)
        stop_server(server)
