"""Poison pills on `ocr-serve` (issue 37, item 6): a page that kills the CPU worker decoding it
fails alone after two deaths, with a clear reason, its job going on; the same bytes sent again
are refused at once. The workers crash on a mark (`cpu_calls.init_cpu_worker_poisoned`), as a
decoder crash on a crafted file would."""

from __future__ import annotations

import io
import re
import time

import httpx
import pytest
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from tests import images
from tests.e2e.conftest import Server
from tests.fakes.cpu_calls import POISON_MARK

# Model-free; its CPU workers crash on `POISON_MARK` (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("fake")

GOOD = images.encode_png(images.latin_lines().image)


def _poisoned_png() -> bytes:
    info = PngInfo()
    info.add_text("Comment", POISON_MARK.decode())
    buf = io.BytesIO()
    Image.new("RGB", (200, 80), "white").save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


POISON = _poisoned_png()


def _cpu_restarts(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(r'^ocr_worker_restarts_total\{kind="cpu"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_page_that_kills_workers_fails_alone_and_is_refused_after(server: Server) -> None:
    files = [("file", ("good.png", GOOD, "image/png")), ("file", ("bad.png", POISON, "image/png"))]
    answer = httpx.post(f"{server.url}/v1/jobs", files=files, timeout=120)
    assert answer.status_code == 202, answer.text
    job_url = f"{server.url}/v1/jobs/{answer.json()['id']}"
    deadline = time.monotonic() + 300
    while (job := httpx.get(job_url, timeout=10).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    assert (job["pages_done"], job["pages_failed"]) == (1, 1), job  # the job went on
    (failed,) = job["failed_pages"]
    assert failed["file"] == "bad.png"
    assert failed["error"]["code"] == "page_quarantined"
    assert "killed 2 of this server's worker processes" in failed["error"]["message"]
    assert _cpu_restarts(server) == 2  # two deaths, not 3 tries x 4 of the runner's

    again = httpx.post(
        f"{server.url}/v1/ocr", content=POISON, headers={"Content-Type": "image/png"}, timeout=120
    )
    assert again.status_code == 422, again.text
    assert again.json()["error"]["code"] == "page_quarantined"
    good = httpx.post(
        f"{server.url}/v1/ocr", content=GOOD, headers={"Content-Type": "image/png"}, timeout=120
    )
    assert good.status_code == 200, good.text
    assert _cpu_restarts(server) == 2  # refused without a worker
