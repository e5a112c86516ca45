"""Decoding untrusted files on `ocr-serve` (issue 26): images are sized before they are decoded, a
job's animated image is decoded once, and job files are counted in CPU workers, not the server."""

from __future__ import annotations

import io
import time
from pathlib import Path

import cv2
import httpx
import numpy as np
import pytest
from PIL import Image

from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import FAKE_MAX_FRAMES as MAX_FRAMES

# Model-free, `input.max_image_pixels` and `input.max_frames_per_document` capped (tests/e2e/
# profiles.py), jobs under `server.data_dir`.
pytestmark = pytest.mark.profile("fake")
DONE_WITHIN_S = 300.0
"""A bound on the wait for a job, not a speed measurement."""


def _gif(frames: int) -> bytes:
    rng = np.random.default_rng(frames)
    pages = [
        Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).convert("P")
        for _ in range(frames)
    ]
    buf = io.BytesIO()
    pages[0].save(buf, format="GIF", save_all=True, append_images=pages[1:])
    return buf.getvalue()


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def _submit(server: Server, files: list[tuple[str, bytes]]) -> httpx.Response:
    parts = [("file", (name, body, "application/octet-stream")) for name, body in files]
    return httpx.post(f"{server.url}/v1/jobs", files=parts, timeout=120)


def test_an_hdr_over_the_pixel_cap_is_refused_without_being_decoded(server: Server) -> None:
    # 4000 x 4000 run-length coded zeros: a small file whose pixels OpenCV would decode to 192 MB
    # of float before anything learnt its size.
    ok, encoded = cv2.imencode(".hdr", np.zeros((4000, 4000, 3), np.float32))
    assert ok
    data = encoded.tobytes()
    decoded_bytes = 4000 * 4000 * 3 * 4
    assert len(data) < decoded_bytes // 100
    pids = httpx.get(f"{server.url}/readyz").json()["cpu_workers"]["pids"]
    pids.append(server.process.pid)
    rss_kb = {}
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak RSS starts again from now
        rss_kb[pid] = _status_kb(pid, "VmRSS")
    response = httpx.post(
        f"{server.url}/v1/ocr",
        content=data,
        headers={"content-type": "image/vnd.radiance"},
        timeout=120,
    )
    assert response.status_code == 422, response.text
    assert "input.max_image_pixels" in response.json()["error"]["message"]
    for pid in pids:
        grown_kb = _status_kb(pid, "VmHWM") - rss_kb[pid]
        assert grown_kb * 1024 < decoded_bytes // 4, (pid, grown_kb)


def test_an_image_with_more_frames_than_the_cap_is_refused(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/ocr",
        content=_gif(MAX_FRAMES + 1),
        headers={"content-type": "image/gif"},
        timeout=120,
    )
    assert response.status_code == 422, response.text
    assert "input.max_frames_per_document" in response.json()["error"]["message"]
    job = _submit(server, [("long.gif", _gif(MAX_FRAMES + 1))])
    assert job.status_code == 422, job.text
    message = job.json()["error"]["message"]
    assert message.startswith("long.gif: ")
    assert "input.max_frames_per_document" in message


def test_a_jobs_pages_are_counted_and_its_gif_read_in_one_pass(server: Server) -> None:
    page = images.encode_png(images.latin_lines().image)
    pdf = images.make_pdf([images.latin_lines().image] * 2, dpi=144.0)
    response = _submit(server, [("anim.gif", _gif(MAX_FRAMES)), ("two.pdf", pdf), ("p.png", page)])
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["pages_total"] == MAX_FRAMES + 2 + 1
    # The GIF was decoded once, by a CPU worker, into a TIFF whose pages decode alone.
    stored = server.data_dir / "jobs" / job["id"] / "files" / "1"
    assert stored.read_bytes()[:4] in (b"II*\x00", b"MM\x00*")
    deadline = time.monotonic() + DONE_WITHIN_S
    status = job
    while status["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
        status = httpx.get(f"{server.url}/v1/jobs/{job['id']}", timeout=30).json()
    assert status["status"] == "succeeded", status
    assert (status["pages_done"], status["pages_failed"]) == (MAX_FRAMES + 3, 0)


def test_an_unreadable_job_file_is_refused_and_the_server_serves_on(server: Server) -> None:
    response = _submit(server, [("broken.pdf", b"%PDF-1.4 this is no PDF")])
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("broken.pdf: Invalid input file")
    page = images.encode_png(images.latin_lines().image)
    ocr = httpx.post(
        f"{server.url}/v1/ocr", content=page, headers={"content-type": "image/png"}, timeout=120
    )
    assert ocr.status_code == 200, ocr.text
