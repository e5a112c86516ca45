"""`/metrics` after real traffic: the families are there and the values match what was sent."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests import images
from tests.e2e.conftest import Server


def _samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{server.url}/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def _total(values, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, lab), v in values.items() if n == name and wanted <= set(lab))


def test_metrics_count_what_was_sent(server: Server) -> None:
    latin = images.encode_png(images.latin_lines().image)
    pdf = images.make_pdf([images.latin_lines().image, images.chinese_lines().image], dpi=144.0)
    before = _samples(server)
    sent = [(latin, "image/png"), (latin, "image/png"), (pdf, "application/pdf")]
    for data, content_type in sent:
        response = httpx.post(
            f"{server.url}/v1/ocr",
            content=data,
            headers={"content-type": content_type},
            timeout=120,
        )
        assert response.status_code == 200
    bad = httpx.post(f"{server.url}/v1/ocr", content=b"junk", headers={"content-type": "image/png"})
    assert bad.status_code == 422
    after = _samples(server)

    def delta(name: str, **labels: str) -> float:
        return _total(after, name, **labels) - _total(before, name, **labels)

    assert delta("ocr_requests_total", endpoint="/v1/ocr", status="200") == 3
    assert delta("ocr_requests_total", endpoint="/v1/ocr", status="422") == 1
    assert delta("ocr_request_seconds_count", endpoint="/v1/ocr") == 4
    assert delta("ocr_pages_total") == 4
    # Four pages went through detection, one row each; every row waited in the det queue once.
    assert delta("ocr_batch_size_sum", stage="det") == 4
    assert delta("ocr_queue_wait_seconds_count", stage="det") == 4
    assert delta("ocr_inference_seconds_count", stage="det") >= 1
    # 4 + 4 + 4 + 4 recognised lines: rec rows add up to the lines returned.
    assert delta("ocr_batch_size_sum", stage="rec") == 16
    for stage in ("det", "rec", "cls"):
        assert ("ocr_queue_depth", (("stage", stage),)) in after
    # Resident memory of every process: the main one, the CPU workers, each device worker.
    devices = httpx.get(f"{server.url}/readyz").json()["devices"]
    for process in ("main", "cpu_workers", *devices):
        assert _total(after, "ocr_process_resident_bytes", process=process) > 20 * 2**20, process
    # No job ran meanwhile: the background's share of both pools did not grow (the profile's
    # server is shared, and a job of an earlier test may still be in the recent window).
    for pool in ("devices", "cpu_workers"):
        share = _total(after, "ocr_background_share", pool=pool)
        assert share <= _total(before, "ocr_background_share", pool=pool), pool
    for kind in ("cpu", "device"):
        assert ("ocr_worker_restarts_total", (("kind", kind),)) in after
