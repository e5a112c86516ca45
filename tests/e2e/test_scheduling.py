"""Cross-request batching and worker faults, against `ocr-serve` run as a user runs it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time

import httpx
import pytest

from tests import images
from tests.e2e.conftest import CONFIG, Server, start_server, stop_server, wait_ready


def _documents() -> list[bytes]:
    return [
        images.encode_png(images.latin_lines().image),
        images.encode_png(images.chinese_lines().image),
        images.encode_png(images.rotated_line().image),
    ]


async def _post_many(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=300) as client:
        return await asyncio.gather(
            *(
                client.post(f"{url}/v1/ocr", content=b, headers={"content-type": "image/png"})
                for b in bodies
            )
        )


def _texts(response: httpx.Response) -> list[str]:
    return [line["text"] for page in response.json()["pages"] for line in page["lines"]]


def _histogram(metrics: str, name: str, stage: str) -> dict[str, float]:
    """Cumulative bucket counts by `le`, summed over devices."""
    values: dict[str, float] = {}
    for match in re.finditer(rf"^{name}_bucket{{(.*?)}} (\S+)$", metrics, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("stage") == stage:
            values[labels["le"]] = values.get(labels["le"], 0.0) + float(match.group(2))
    return values


def test_concurrent_requests_give_sequential_texts_and_batch_rec(server: Server) -> None:
    documents = _documents()
    sequential = {}
    for doc in documents:
        response = httpx.post(
            f"{server.url}/v1/ocr", content=doc, headers={"content-type": "image/png"}, timeout=120
        )
        assert response.status_code == 200
        sequential[doc] = _texts(response)
    # Pages of one kind arrive together, as a client's batch would: their crops share widths.
    bodies = [documents[0]] * 6 + [documents[1]] * 5 + [documents[2]] * 5
    responses = asyncio.run(_post_many(server.url, bodies))
    assert [r.status_code for r in responses] == [200] * 16
    for body, response in zip(bodies, responses, strict=True):
        assert _texts(response) == sequential[body]
    metrics = httpx.get(f"{server.url}/metrics").text
    rec = _histogram(metrics, "ocr_batch_size", "rec")
    # Every document has at most 4 lines: one chunk of <= 4 crops. A batch of more rows holds
    # chunks of several requests.
    assert rec["+Inf"] > rec["4.0"], rec
    assert 'ocr_requests_total{endpoint="/v1/ocr",status="200"}' in metrics


def _load(url: str, n: int, during) -> list[int]:
    async def run() -> list[int]:
        bodies = [_documents()[i % 3] for i in range(n)]
        task = asyncio.ensure_future(_post_many(url, bodies))
        await asyncio.sleep(1.0)
        during()
        responses = await task
        return [r.status_code for r in responses]

    return asyncio.run(run())


@pytest.mark.parametrize("target", ["device", "cpu"])
def test_kill_9_of_a_worker_under_load_loses_no_request(tmp_path, target: str) -> None:
    server = start_server(tmp_path)
    try:
        wait_ready(server)
        before = httpx.get(f"{server.url}/readyz").json()
        if target == "device":
            victim = before["devices"]["cpu"]["pid"]
        else:
            victim = before["cpu_workers"]["pids"][0]
        statuses = _load(server.url, 12, lambda: os.kill(victim, signal.SIGKILL))
        # Every accepted request is answered: retried elsewhere (200) or a clean 503.
        assert len(statuses) == 12
        assert set(statuses) <= {200, 503}, statuses
        assert statuses.count(200) >= 10, statuses
        deadline = time.monotonic() + 120
        while httpx.get(f"{server.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        after = httpx.get(f"{server.url}/readyz").json()
        if target == "device":
            assert after["devices"]["cpu"]["restarts"] == 1
            assert after["devices"]["cpu"]["pid"] != victim
        else:
            assert after["cpu_workers"]["restarts"] >= 1
            assert victim not in after["cpu_workers"]["pids"]
        again = asyncio.run(_post_many(server.url, _documents()))
        assert [r.status_code for r in again] == [200, 200, 200]
        metrics = httpx.get(f"{server.url}/metrics").text
        assert f'ocr_worker_restarts_total{{kind="{target}"}}' in metrics
    finally:
        stop_server(server)


def test_two_cpu_device_workers_share_the_cores_and_both_serve(tmp_path) -> None:
    config = CONFIG.replace("cpu_workers = 2\n", "cpu_workers = 2\ncpu_instances = 2\n")
    server = start_server(tmp_path, config)
    try:
        wait_ready(server)
        devices = httpx.get(f"{server.url}/readyz").json()["devices"]
        assert sorted(devices) == ["cpu#0", "cpu#1"]
        assert devices["cpu#0"]["pid"] != devices["cpu#1"]["pid"]
        documents = _documents()
        sequential = [_texts(r) for r in asyncio.run(_post_many(server.url, documents))]
        bodies = documents * 4
        responses = asyncio.run(_post_many(server.url, bodies))
        assert [r.status_code for r in responses] == [200] * len(bodies)
        assert [_texts(r) for r in responses] == sequential * 4
        metrics = httpx.get(f"{server.url}/metrics").text
        for device in ("cpu#0", "cpu#1"):
            calls = re.search(
                rf'^ocr_batch_size_count{{device="{device}",stage="det"}} (\S+)$', metrics, re.M
            )
            assert calls is not None, (device, metrics[-2000:])
            assert float(calls.group(1)) > 0, device
        # The cores are split between the two workers: one math thread each on this machine.
        effective = next(
            line
            for line in server.log.read_text().splitlines()
            if "effective configuration" in line
        )
        threads = json.loads(effective.split("effective configuration: ", 1)[1])["engine"]
        assert threads["cpu_threads"] == max(1, (os.cpu_count() or 1) // 2)
    finally:
        stop_server(server)
