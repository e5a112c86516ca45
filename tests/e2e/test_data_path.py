"""A real server reads a page with its pixels crossing processes as bytes (issue 31): the texts,
and what `/metrics` says moved through shared memory and cost in CPU time."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pipelines.det_preprocess import det_input_size
from pipelines.types import DetParams
from tests import images
from tests.e2e.conftest import Server


def _samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{server.url}/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def _total(
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    wanted = set(labels.items())
    return sum(v for (n, lab), v in values.items() if n == name and wanted <= set(lab))


def test_a_page_is_read_with_a_byte_a_channel_to_the_device(server: Server) -> None:
    page = images.latin_lines()
    height, width = page.image.shape[:2]
    before = _samples(server)
    response = httpx.post(
        f"{server.url}/v1/ocr",
        content=images.encode_png(page.image),
        headers={"content-type": "image/png"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    texts = [line["text"] for line in response.json()["pages"][0]["lines"]]
    assert texts == page.lines
    after = _samples(server)

    def delta(name: str, **labels: str) -> float:
        return _total(after, name, **labels) - _total(before, name, **labels)

    det_h, det_w = det_input_size(height, width, DetParams())
    # The detector's input as uint8 pixels, 3 bytes a pixel (float32 was 12), its map back as
    # float16, 2 bytes a pixel (float32 was 4).
    assert delta("ocr_shm_bytes_total", stage="det", direction="to_device") == 3 * det_h * det_w
    assert delta("ocr_shm_bytes_total", stage="det", direction="from_device") == 2 * det_h * det_w
    # Each recognition row: 3 x 48 x its padded width, at least 320, a byte each.
    rec_bytes = delta("ocr_shm_bytes_total", stage="rec", direction="to_device")
    assert rec_bytes >= len(page.lines) * 3 * 48 * 320
    assert rec_bytes % (3 * 48) == 0
    assert delta("ocr_shm_bytes_total", stage="rec", direction="from_device") == 0  # inline
    # CPU time of every group of processes, what `make bench` divides by its pages.
    devices = httpx.get(f"{server.url}/readyz").json()["devices"]
    for process in ("main", "cpu_workers", *devices):
        assert _total(after, "ocr_process_cpu_seconds", process=process) > 0, process
    assert delta("ocr_process_cpu_seconds", process="cpu_workers") > 0
