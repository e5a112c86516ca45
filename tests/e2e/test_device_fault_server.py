"""Issue 27 item 3 against a real `ocr-serve`: a sticky CUDA error in the device worker (a
model-free fake, `tests.fakes.predictors:CUDA_FAULT`) ends that worker; `/readyz` turns
unready while the pool starts a fresh one, the page it held is read there, and the server is
ready again."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import httpx

from tests import images
from tests.e2e.conftest import ONE_WORKER, fresh_server, stop_server, wait_ready

CONFIG = (
    """
[server]
log_level = "info"
"""
    + ONE_WORKER
    + """[jobs]
data_dir = "{data_dir}"
"""
)
PNG = base64.b64encode(images.encode_png(images.latin_lines().image)).decode()


def test_a_device_fault_restarts_the_worker_and_the_page_is_still_read(tmp_path: Path) -> None:
    fault = tmp_path / "fault"
    server = fresh_server(
        tmp_path,
        CONFIG.format(data_dir=tmp_path / "jobs"),
        backend="tests.fakes.predictors:CUDA_FAULT",
        env={"OCR_FAKE_CUDA_FAULT_FILE": str(fault)},
    )
    try:
        wait_ready(server)
        fault.touch()  # the next batch meets an illegal memory access
        readiness: list[int] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                readiness.append(httpx.get(f"{server.url}/readyz", timeout=10).status_code)
                stop.wait(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            answer = httpx.post(f"{server.url}/ocr", json={"file": PNG, "fileType": 1}, timeout=300)
        finally:
            stop.set()
            watcher.join(timeout=30)
        assert answer.status_code == 200, answer.text
        assert not fault.exists()  # the fault did happen
        assert 503 in readiness  # unready while the worker restarted
        wait_ready(server)
        metrics = httpx.get(f"{server.url}/metrics").text
        assert 'ocr_worker_restarts_total{kind="device"} 1.0' in metrics
        assert "exited after a device fault" in server.log.read_text()
    finally:
        stop_server(server)
