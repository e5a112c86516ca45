"""What a tenant's requests cost, charged for what they take, against a real `ocr-serve` (issue 49,
items 6, 8 and 9; model-free device workers, two CPU workers, a 1.5 GiB memory budget): an
image's searchable PDF charged for its frame as sent, the unclip ratio capped, rendered outputs
counted in the stored bytes, and an animated GIF's conversion held in the budget until its worker
is done with it, hung up on or not."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from PIL import Image

from loadtest.bench.memory_peak import TreeSampler, idle_footprint
from tests import images
from tests.e2e.conftest import SLOW_FAKE, Server, fresh_serving
from tests.e2e.test_job_staging import tiny_gif

MIB = 1 << 20
BUDGET = 1536 * MIB
STORED_BYTES = 6_000_000
CONFIG = f"""
[server]
log_level = "info"
memory_budget_bytes = {BUDGET}
[input]
allow_url = true
url_allowed_hosts = ["files.example"]
[auth]
max_stored_bytes = {STORED_BYTES}
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 2
cpu_instances = 1
[jobs]
data_dir = "{{data_dir}}"
max_staging_pixels = 40000000000
staging_timeout_s = 20.0
"""
PNG = images.encode_png(images.latin_lines().image)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("charges")
    with fresh_serving(tmp, CONFIG.format(data_dir=tmp / "jobs"), backend=SLOW_FAKE) as srv:
        yield srv


def _flat_png(side: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), (250, 250, 250)).save(buf, format="PNG")
    return buf.getvalue()


def _ocr(server: Server, query: str, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/ocr{query}",
        content=body,
        headers={"content-type": "image/png"},
        timeout=300,
    )


def test_the_unclip_ratio_stops_where_paddleocrs_useful_range_does(server: Server) -> None:
    """Up to 100 was accepted: with `det_box_thresh=0` each of up to 1000 boxes grew to near the
    page's size, its crops all held at once."""
    refused = _ocr(server, "?det_unclip_ratio=5&det_box_thresh=0", PNG)
    assert refused.status_code == 422, refused.text
    assert "unclip_ratio" in refused.json()["error"]["message"]
    assert "4" in refused.json()["error"]["message"]
    assert _ocr(server, "?det_unclip_ratio=4", PNG).status_code == 200


def test_a_searchable_pdf_of_an_image_is_charged_its_frame_as_sent(server: Server) -> None:
    """The PDF embeds the image decoded at its size as sent (81 Mpx here), up to 16 bytes a pixel,
    where 4 were charged: under this budget it would not fit (413), and did (200) before, the
    worker taking ~1 GB beyond its charge."""
    big = _flat_png(9000)
    answer = _ocr(server, "?format=pdf", big)
    assert answer.status_code == 413, answer.text[:300]
    message = answer.json()["error"]["message"]
    assert "Rendering this document as pdf" in message
    assert "server.memory_budget_bytes" in message
    assert _ocr(server, "", big).status_code == 200  # its OCR still fits (scaled)
    small = _ocr(server, "?format=pdf", _flat_png(2000))
    assert small.status_code == 200
    assert small.content.startswith(b"%PDF-")


def test_a_url_is_fetched_on_its_schemes_port_only(server: Server) -> None:
    """Issue 49: an allow-listed host was fetched on any port (its admin ports, other
    services); now 80 or 443, or `input.url_allowed_ports`."""
    for url in ("http://files.example:8080/a.png", "https://files.example:22/a.png"):
        answer = httpx.post(f"{server.url}/ocr", json={"file": url, "fileType": 1}, timeout=60)
        assert answer.status_code == 422, answer.text
        assert "input.url_allowed_ports" in answer.json()["errorMsg"]


def _noise_png(width: int, height: int) -> bytes:
    noise = np.random.default_rng(1).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return images.encode_png(noise)


def _submit(server: Server, *files: tuple[str, bytes, str]) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/jobs",
        files=[("file", (name, data, kind)) for name, data, kind in files],
        timeout=120,
    )


def _wait_done(server: Server, job_id: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = httpx.get(f"{server.url}/v1/jobs/{job_id}", timeout=30).json()["status"]
        if status in ("succeeded", "failed"):
            return
        time.sleep(0.3)
    raise TimeoutError(job_id)


def test_rendered_outputs_count_against_the_stored_bytes(server: Server) -> None:
    """Before, `outputs/{i}[.force|.redo].pdf` were kept outside the quota: a key could render
    each document in every format and mode, and upload as much again."""
    upload = _noise_png(1000, 500)  # ~1.5 MB
    job = _submit(server, ("noise.png", upload, "image/png"))
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    try:
        _wait_done(server, job_id)
        document = f"{server.url}/v1/jobs/{job_id}/documents/0"
        first = httpx.get(f"{document}?format=pdf", timeout=120)
        assert first.status_code == 200, first.text
        # 1.5 MB uploaded and 1.5 MB of PDF held; another PDF may take twice its upload.
        again = httpx.get(f"{document}?format=pdf&mode=force", timeout=120)
        assert again.status_code == 429, again.text
        assert again.json()["error"]["code"] == "stored_quota_exceeded"
        assert "rendered outputs included" in again.json()["error"]["message"]
        assert httpx.get(f"{document}?format=pdf", timeout=60).status_code == 200  # kept one
        more = _submit(server, ("more.png", _noise_png(1000, 1200), "image/png"))  # ~3.6 MB
        assert more.status_code == 429, more.text  # 1.5 + 1.5 + 3.6 > 6 MB
    finally:
        httpx.delete(f"{server.url}/v1/jobs/{job_id}", timeout=60)


def _gif_upload(server: Server, count: int) -> socket.socket:
    """A job upload of `count` 8000 x 8000 GIFs of 300 one-pixel frames, its answer unread."""
    gif = tiny_gif(8000, 300)
    boundary = "charges-boundary"
    body = b""
    for i in range(count):
        body += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="g{i}.gif"'
                "\r\nContent-Type: image/gif\r\n\r\n"
            ).encode()
            + gif
            + b"\r\n"
        )
    body += f"--{boundary}--\r\n".encode()
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def _budget_used(server: Server) -> int:
    used: int = httpx.get(f"{server.url}/readyz", timeout=30).json()["memory_budget"]["used_bytes"]
    return used


def _wait_until(check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise TimeoutError


def test_gif_staging_hung_up_on_stays_within_the_budget(server: Server) -> None:
    """A job of two 8000 x 8000 GIFs of 300 one-pixel frames, hung up on mid-conversion, and
    another upload's conversion waiting for room: before, the charge (16 B a screen pixel, ~1 GB)
    was given back at the hang-up while the worker went on converting for its 2 s of grace, and
    the other conversion ran beside it (the issue's probe: 1.6 GB in one process beside other
    load); now the charge stays until the worker is killed, and the other waits for it."""
    pid = server.process.pid
    idle = idle_footprint(pid)
    charge = 16 * 8000 * 8000
    with TreeSampler(pid) as sampler:
        first = _gif_upload(server, 2)
        _wait_until(lambda: _budget_used(server) >= charge, 60)  # converting
        first.close()  # hung up on
        second = _gif_upload(server, 1)
        try:
            time.sleep(0.7)
            budget = httpx.get(f"{server.url}/readyz", timeout=30).json()["memory_budget"]
            # The first's worker still converts: its charge held, the second waiting on it.
            assert budget["used_bytes"] >= charge, budget
            assert budget["waiting"] == 1, budget
            _wait_until(lambda: "killing it" in server.log.read_text(), 30)
            time.sleep(2.0)  # the second converts, alone
        finally:
            second.close()
        _wait_until(lambda: _budget_used(server) == 0, 30)
    grown = sampler.peak_total_bytes - idle
    assert grown <= BUDGET, f"the tree grew {grown / MIB:.0f} MiB past idle, budget 1536 MiB"
    assert grown > charge // 4  # the conversions did run
    assert httpx.get(f"{server.url}/livez", timeout=30).status_code == 200
