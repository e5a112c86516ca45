"""Cross-request batching and worker faults, against `ocr-serve` run as a user runs it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
import time

import httpx
import psutil
import pytest

from serving.log_config import read_effective_config
from tests import images
from tests.e2e.conftest import CONFIG, ONE_SET, Server, fresh_server, stop_server, wait_ready


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


def _spawned_children(server: Server) -> list[psutil.Process]:
    """The server's spawned worker processes (CPU and device workers), starting ones included."""
    children = psutil.Process(server.process.pid).children()
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
    return found


def _busy(pid: int) -> bool:
    """Whether the process used CPU time in the last 50 ms."""
    try:
        process = psutil.Process(pid)
        before = sum(process.cpu_times()[:2])
        time.sleep(0.05)
        return sum(process.cpu_times()[:2]) > before
    except psutil.Error:
        return False


def _chaos(server: Server, stop: threading.Event, killed: list[str]) -> None:
    """An operator's chaos test: kill -9 a CPU worker seen busy, four times, then the replacement
    caught starting, then the device worker while it holds work."""
    device = httpx.get(f"{server.url}/readyz").json()["devices"]["cpu"]["pid"]
    deadline = time.monotonic() + 240
    while len(killed) < 4 and not stop.is_set() and time.monotonic() < deadline:
        known = {c.pid for c in _spawned_children(server)}
        victim = next((pid for pid in known - {device} if _busy(pid)), None)
        if victim is None:
            continue
        os.kill(victim, signal.SIGKILL)
        killed.append(f"busy cpu {victim}")
        if len(killed) < 4:
            time.sleep(0.3)
            continue
        while not stop.is_set() and time.monotonic() < deadline:
            fresh = [c.pid for c in _spawned_children(server) if c.pid not in known]
            if fresh:
                os.kill(fresh[0], signal.SIGKILL)
                killed.append(f"starting cpu {fresh[0]}")
                break
            time.sleep(0.002)
    while not stop.is_set() and time.monotonic() < deadline:
        if _busy(device):
            os.kill(device, signal.SIGKILL)
            killed.append(f"busy device {device}")
            return


def test_kill_9_inside_in_flight_work_loses_no_request(tmp_path) -> None:
    server = fresh_server(tmp_path, CONFIG + ONE_SET)
    try:
        wait_ready(server)
        documents = _documents()
        sequential = [_texts(r) for r in asyncio.run(_post_many(server.url, documents))]
        stop = threading.Event()
        killed: list[str] = []
        killer = threading.Thread(target=_chaos, args=(server, stop, killed))

        async def waves() -> list[httpx.Response]:
            sent = []
            for wave in range(3):  # 12 real pages in three waves, the kills landing among them
                sent.append(
                    asyncio.ensure_future(_post_many(server.url, documents + documents[:1]))
                )
                if wave == 0:
                    await asyncio.sleep(0.5)
                    killer.start()
                await asyncio.sleep(2.0)
            return [r for batch in await asyncio.gather(*sent) for r in batch]

        try:
            responses = asyncio.run(waves())
        finally:
            stop.set()
            killer.join()
        assert len(killed) == 6, killed
        # Every accepted request is answered, and right: work held by a killed worker runs again.
        assert [r.status_code for r in responses] == [200] * 12, [r.text for r in responses]
        assert [_texts(r) for r in responses] == (sequential + sequential[:1]) * 3
        deadline = time.monotonic() + 120
        while httpx.get(f"{server.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        after = httpx.get(f"{server.url}/readyz").json()
        assert after["devices"]["cpu"]["restarts"] == 1
        assert after["cpu_workers"]["restarts"] >= 5
        assert len(after["cpu_workers"]["pids"]) == 2
        again = asyncio.run(_post_many(server.url, documents))
        assert [_texts(r) for r in again] == sequential
        metrics = httpx.get(f"{server.url}/metrics").text
        assert 'ocr_worker_restarts_total{kind="cpu"}' in metrics
        assert 'ocr_worker_restarts_total{kind="device"} 1.0' in metrics
        log = server.log.read_text()
        assert "FileNotFoundError" not in log
    finally:
        stop_server(server)


def _alone_batches(url: str, stage: str) -> float:
    """`ocr_alone_batches_total` of `stage`, summed over devices."""
    metrics = httpx.get(f"{url}/metrics").text
    pattern = rf'^ocr_alone_batches_total{{device="[^"]*",stage="{stage}"}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, metrics, re.M))


# Two CPU device workers, as config.toml ships (tests/e2e/profiles.py).
@pytest.mark.profile("image")
def test_two_cpu_device_workers_share_the_cores_and_a_lone_page_uses_them_all(
    server: Server,
) -> None:
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
    effective = read_effective_config(server.log.read_text())
    assert effective is not None
    threads = effective["engine"]
    assert threads["cpu_threads"] == max(1, (os.cpu_count() or 1) // 2)
    # A page alone in the server (the other worker idle, nothing queued): its detector runs
    # alone, on every core (issue 28), with the text it has in company.
    lone = (os.cpu_count() or 1) > threads["cpu_threads"]
    assert threads["cpu_lone_threads"] == ((os.cpu_count() or 1) if lone else 0)
    for device in devices.values():  # what each worker said it runs a lone batch on
        assert device["lone_threads"] == threads["cpu_lone_threads"]
    before = _alone_batches(server.url, "det")
    (response,) = asyncio.run(_post_many(server.url, documents[:1]))
    assert _texts(response) == sequential[0]
    assert _alone_batches(server.url, "det") - before == (1 if lone else 0)
