"""Poison pills on `ocr-serve` (issue 37, item 6; issue 49, item 7): a page that kills the CPU
worker decoding it fails alone after two deaths, with a clear reason, its job going on; the same
bytes sent again are refused at once; a document whose pages all crash is stopped after three
deaths in all, not two a page; a page that hangs its worker past the request's deadline counts
as a death. The workers crash (or hang) on a mark (`cpu_calls.init_cpu_worker_poisoned`), as a
decoder on a crafted file would."""

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
from tests.fakes.cpu_calls import HANG_MARK, POISON_MARK

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


def _poisoned_tiff(pages: int) -> bytes:
    """A multi-page TIFF whose every page crashes the worker decoding it."""
    frames = [Image.new("RGB", (120, 60), (255, 255, 255 - i)) for i in range(pages)]
    buf = io.BytesIO()
    frames[0].save(
        buf,
        format="TIFF",
        save_all=True,
        append_images=frames[1:],
        description=POISON_MARK.decode(),
    )
    return buf.getvalue()


def _hanging_png() -> bytes:
    info = PngInfo()
    info.add_text("Comment", HANG_MARK.decode())
    buf = io.BytesIO()
    Image.new("RGB", (200, 80), "white").save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def _cpu_restarts(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(r'^ocr_worker_restarts_total\{kind="cpu"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_page_that_kills_workers_fails_alone_and_is_refused_after(server: Server) -> None:
    before = _cpu_restarts(server)  # the profile's server is shared: earlier tests' deaths
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
    assert _cpu_restarts(server) - before == 2  # two deaths, not 3 tries x 4 of the runner's

    again = httpx.post(
        f"{server.url}/v1/ocr", content=POISON, headers={"Content-Type": "image/png"}, timeout=120
    )
    assert again.status_code == 422, again.text
    assert again.json()["error"]["code"] == "page_quarantined"
    good = httpx.post(
        f"{server.url}/v1/ocr", content=GOOD, headers={"Content-Type": "image/png"}, timeout=120
    )
    assert good.status_code == 200, good.text
    assert _cpu_restarts(server) - before == 2  # refused without a worker


def _finished(server: Server, job_id: str) -> dict[str, object]:
    job_url = f"{server.url}/v1/jobs/{job_id}"
    deadline = time.monotonic() + 300
    while (job := httpx.get(job_url, timeout=10).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    return job  # type: ignore[no-any-return]


def test_a_document_whose_pages_all_crash_is_stopped_after_three_deaths(server: Server) -> None:
    """Before, quarantine was per page: five crashing pages cost ten worker deaths (the profile
    reads at most 5 frames of a document)."""
    before = _cpu_restarts(server)
    files = [("file", ("crashing.tiff", _poisoned_tiff(5), "image/tiff"))]
    answer = httpx.post(f"{server.url}/v1/jobs", files=files, timeout=120)
    assert answer.status_code == 202, answer.text
    job = _finished(server, answer.json()["id"])
    assert job["pages_failed"] == 5, job
    # Three deaths, and at most one more already running on another CPU worker (before: 10).
    assert _cpu_restarts(server) - before <= 3 + 1
    codes = {page["error"]["code"] for page in job["failed_pages"]}  # type: ignore[attr-defined]
    assert codes == {"page_quarantined"}
    messages = [page["error"]["message"] for page in job["failed_pages"]]  # type: ignore[attr-defined]
    assert any("pages killed 3 of this server's worker processes" in m for m in messages)


def test_a_page_that_hangs_its_worker_past_the_deadline_counts_as_a_death(server: Server) -> None:
    """Before, a worker killed because its page ran past the request's deadline was not counted:
    the page hung a worker for the whole deadline at every request, for ever."""
    hanging = _hanging_png()
    headers = {"Content-Type": "image/png", "X-Request-Timeout": "1.5"}
    start = _cpu_restarts(server)  # the profile's server is shared: earlier tests' deaths
    deaths = 0
    for _ in range(6):  # two deaths; on a busy machine a request's 1.5 s may end before its
        # page reaches a worker (a 504 and no death), so it may take a few more requests
        answer = httpx.post(f"{server.url}/v1/ocr", content=hanging, headers=headers, timeout=120)
        assert answer.status_code == 504, answer.text
        # The worker is killed 2 s after its caller went away; its death is counted before the
        # pool starts the next process.
        deadline = time.monotonic() + 15
        while _cpu_restarts(server) <= start + deaths and time.monotonic() < deadline:
            time.sleep(0.2)
        deaths = int(_cpu_restarts(server) - start)
        if deaths >= 2:
            break
    assert deaths >= 2, f"{deaths} hung workers killed after 6 requests past their deadline"
    refused = httpx.post(f"{server.url}/v1/ocr", content=hanging, headers=headers, timeout=120)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "page_quarantined"
    good = httpx.post(
        f"{server.url}/v1/ocr", content=GOOD, headers={"Content-Type": "image/png"}, timeout=120
    )
    assert good.status_code == 200, good.text
