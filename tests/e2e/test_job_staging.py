"""Job staging as bounded background work on `ocr-serve` (issue 37, item 2): tiny animated GIFs
with a huge logical screen and many frames are refused or charged from their headers, their
frames stored scaled, their conversion stopped at a deadline and when the client hangs up, and a
client's uploads at once capped."""

from __future__ import annotations

import contextlib
import io
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests import images
from tests.e2e.conftest import Server

# The shipped models, a 512 MiB memory budget, pages at most 1000 px a side, staging bounded by a
# 5 s deadline and one upload at once a client (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("staging")
MIB = 1 << 20
PNG = images.encode_png(images.latin_lines().image)


def tiny_gif(side: int, frames: int) -> bytes:
    """An animated GIF of `frames` one-pixel frames on a `side` x `side` logical screen: a few
    hundred bytes that decode to `frames` x `side`^2 pixels."""
    pictures = [
        Image.new("RGB", (1, 1), (i % 256, 7 * i % 256, 13 * i % 256)) for i in range(frames)
    ]
    buf = io.BytesIO()
    pictures[0].save(buf, format="GIF", save_all=True, append_images=pictures[1:], duration=10)
    data = bytearray(buf.getvalue())
    data[6:10] = side.to_bytes(2, "little") * 2  # the logical screen's width and height
    return bytes(data)


def _post(server: Server, name: str, data: bytes, **kwargs: object) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/jobs",
        files={"file": (name, data, "application/octet-stream")},
        timeout=kwargs.pop("timeout", 120),  # type: ignore[arg-type]
    )


def _still_serving(server: Server) -> None:
    assert httpx.get(f"{server.url}/livez", timeout=10).status_code == 200
    answer = httpx.post(
        f"{server.url}/v1/ocr", content=PNG, headers={"Content-Type": "image/png"}, timeout=120
    )
    assert answer.status_code == 200, answer.text


def _cpu_restarts(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(r'^ocr_worker_restarts_total\{kind="cpu"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_frames_times_screen_over_the_cap_are_refused_from_the_headers(server: Server) -> None:
    # 500 frames on a 5000 x 5000 screen: 12.5 Gpx to decode, from a file of a few KB.
    answer = _post(server, "bomb.gif", tiny_gif(5000, 500))
    assert answer.status_code == 413, answer.text
    message = answer.json()["error"]["message"]
    assert "bomb.gif" in message
    assert "jobs.max_staging_pixels" in message
    _still_serving(server)


def test_a_frame_over_the_memory_budget_is_refused_before_it_is_decoded(server: Server) -> None:
    # One 6000 x 6000 frame held while converting: 576 MB, over the 512 MiB budget.
    answer = _post(server, "wide.gif", tiny_gif(6000, 3))
    assert answer.status_code == 413, answer.text
    assert "server.memory_budget_bytes" in answer.json()["error"]["message"]
    _still_serving(server)


def test_frames_are_stored_scaled_to_max_page_side_px(server: Server, tmp_path: Path) -> None:
    answer = _post(server, "small.gif", tiny_gif(3000, 3))
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["pages_total"] == 3
    stored = Path(re.sub(r'.*data_dir = "([^"]+)".*', r"\1", _config_of(server), flags=re.S))
    (path,) = (stored / "jobs" / job["id"] / "files").iterdir()
    with Image.open(path) as tiff:
        sizes = []
        for index in range(tiff.n_frames):
            tiff.seek(index)
            sizes.append(tiff.size)
    assert sizes == [(1000, 1000)] * 3  # not 3000 x 3000 each


def test_staging_past_its_deadline_gets_504_and_the_server_goes_on(server: Server) -> None:
    # 300 frames of 25 Mpx: minutes of decoding, within the pixel cap and the budget.
    answer = _post(server, "slow.gif", tiny_gif(5000, 300))
    assert answer.status_code == 504, answer.text
    assert "jobs.staging_timeout_s" in answer.json()["error"]["message"]
    _still_serving(server)


def test_a_client_that_hangs_up_stops_its_staging(server: Server) -> None:
    restarts = _cpu_restarts(server)
    with pytest.raises(httpx.ReadTimeout):
        _post(server, "gone.gif", tiny_gif(5000, 300), timeout=httpx.Timeout(120, read=1.0))
    deadline = time.monotonic() + 60
    while _cpu_restarts(server) == restarts and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _cpu_restarts(server) > restarts  # the worker converting it was stopped
    assert "client went away" in server.log.read_text()
    _still_serving(server)


def test_uploads_at_once_are_capped_per_client(server: Server) -> None:
    stop = threading.Event()
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as held:
        held.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\n\r\n--b\r\n"
            b'Content-Disposition: form-data; name="file"; filename="held.png"\r\n\r\n'
        )

        def trickle() -> None:  # under the upload's idle timeout, so it stays in progress
            with contextlib.suppress(OSError):
                while not stop.wait(0.3):
                    held.sendall(b"x")

        trickling = threading.Thread(target=trickle, daemon=True)
        trickling.start()
        try:
            deadline = time.monotonic() + 6
            while True:
                second = _post(server, "b.png", PNG)
                if second.status_code == 429 or time.monotonic() > deadline:
                    break
            assert second.status_code == 429, second.text
            assert "jobs.max_uploads_per_key" in second.json()["error"]["message"]
            assert "Retry-After" in second.headers
        finally:
            stop.set()
            trickling.join()
    deadline = time.monotonic() + 30
    while (third := _post(server, "c.png", PNG)).status_code == 429:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert third.status_code == 202, third.text


def _config_of(server: Server) -> str:
    return (server.log.parent / "config.toml").read_text()
