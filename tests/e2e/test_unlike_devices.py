"""Unlike devices: a fast fake "GPU" and a slow CPU, placed by expected finish time."""

from __future__ import annotations

import asyncio
import re

import httpx

from tests import images
from tests.e2e.conftest import SLOW_FAKE, fresh_server, stop_server, wait_ready

# The "GPU" is a device worker named gpu:0 with GPU batch limits, on the fake backend: no CUDA.
# One page a det batch and one batch at a time (none queued), so that a backlog is easy to make.
UNLIKE = """
[server]
log_level = "info"
max_inflight_pages = 256
[workers]
devices = ["gpu:0", "cpu"]
cpu_workers = 2
cpu_instances = 1
[workers.gpu]
det = { max_batch_size = 1, max_cost = 32000000 }
inflight_batches = 1
queued_batches = 0
[engine]
# Any named engine: the fake replaces it. "auto" (the default) looks for a real GPU engine first.
gpu_backend = "torch"
"""


def _batches(metrics: str, device: str, stage: str) -> float:
    match = re.search(
        rf'^ocr_batch_size_count{{device="{device}",stage="{stage}"}} (\S+)$', metrics, re.M
    )
    return float(match.group(1)) if match else 0.0


async def _waves(url: str, body: bytes, waves: int, per_wave: int) -> list[int]:
    async with httpx.AsyncClient(timeout=120) as client:
        sent = []
        for _ in range(waves):
            sent += [
                asyncio.ensure_future(
                    client.post(
                        f"{url}/v1/ocr", content=body, headers={"content-type": "image/png"}
                    )
                )
                for _ in range(per_wave)
            ]
            await asyncio.sleep(0.3)
        return [r.status_code for r in await asyncio.gather(*sent)]


def test_the_slow_device_leaves_pages_to_the_fast_one_unless_a_backlog_needs_it(
    tmp_path,
) -> None:
    server = fresh_server(
        tmp_path,
        UNLIKE,
        backend=SLOW_FAKE,
        env={"OCR_FAKE_LATENCY_S_GPU": "0.05", "OCR_FAKE_LATENCY_S_CPU": "0.4"},
    )
    try:
        wait_ready(server)
        body = images.encode_png(images.latin_lines().image)
        # Light load (2 pages every 0.3 s, the GPU does 20/s): plain work pulling hands the idle
        # CPU about every other page; with placement it runs the one that measures it.
        assert asyncio.run(_waves(server.url, body, waves=10, per_wave=2)) == [200] * 20
        metrics = httpx.get(f"{server.url}/metrics").text
        gpu, cpu = _batches(metrics, "gpu:0", "det"), _batches(metrics, "cpu", "det")
        assert gpu >= 18, (gpu, cpu)
        assert cpu <= 2, (gpu, cpu)
        # Heavy load (12 pages every 0.3 s): past ~8 pages queued the GPU would reach the last
        # one later than the CPU finishes it, so the CPU takes pages from the tail.
        assert asyncio.run(_waves(server.url, body, waves=8, per_wave=12)) == [200] * 96
        metrics = httpx.get(f"{server.url}/metrics").text
        heavy_cpu = _batches(metrics, "cpu", "det") - cpu
        assert heavy_cpu >= 2, heavy_cpu
        ready = httpx.get(f"{server.url}/readyz").json()
        measured = {(e["device"], e["stage"]) for e in ready["cost_model"]}
        assert {("gpu:0", "det"), ("cpu", "det")} <= measured
        assert re.search(r'^ocr_batch_cost_seconds\{device="cpu",.*stage="det"\}', metrics, re.M)
    finally:
        stop_server(server)
