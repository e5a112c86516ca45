"""Load-test figures and reports: percentiles, tables, /metrics deltas, arrival schedule."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from loadtest.client import Outcome, count_pages, prepare_request
from loadtest.documents import Document, load_documents
from loadtest.engine_limit import measure
from loadtest.plots import bucket_labels
from loadtest.report import markdown_table, write_reports
from loadtest.result import LevelResult, percentile, summarize
from loadtest.schedule import poisson_arrivals
from loadtest.server_metrics import StageMetrics, parse_histograms, stage_metrics

BEFORE = """\
# HELP ocr_batch_size Rows per predictor call.
# TYPE ocr_batch_size histogram
ocr_batch_size_bucket{device="gpu:0",le="1.0",stage="det"} 2.0
ocr_batch_size_bucket{device="gpu:0",le="2.0",stage="det"} 2.0
ocr_batch_size_bucket{device="gpu:0",le="4.0",stage="det"} 3.0
ocr_batch_size_bucket{device="gpu:0",le="+Inf",stage="det"} 3.0
ocr_batch_size_count{device="gpu:0",stage="det"} 3.0
ocr_batch_size_sum{device="gpu:0",stage="det"} 6.0
# HELP ocr_queue_wait_seconds Time items waited in a batching queue.
# TYPE ocr_queue_wait_seconds histogram
ocr_queue_wait_seconds_bucket{le="0.1",stage="det"} 3.0
ocr_queue_wait_seconds_bucket{le="+Inf",stage="det"} 3.0
ocr_queue_wait_seconds_count{stage="det"} 3.0
ocr_queue_wait_seconds_sum{stage="det"} 0.3
"""

# det on gpu:0 gained 2 batches of 2 and 1 of 4 (sum +8); det on gpu:1 and rec are new series.
AFTER = """\
# TYPE ocr_batch_size histogram
ocr_batch_size_bucket{device="gpu:0",le="1.0",stage="det"} 2.0
ocr_batch_size_bucket{device="gpu:0",le="2.0",stage="det"} 4.0
ocr_batch_size_bucket{device="gpu:0",le="4.0",stage="det"} 6.0
ocr_batch_size_bucket{device="gpu:0",le="+Inf",stage="det"} 6.0
ocr_batch_size_count{device="gpu:0",stage="det"} 6.0
ocr_batch_size_sum{device="gpu:0",stage="det"} 14.0
ocr_batch_size_bucket{device="gpu:1",le="1.0",stage="det"} 1.0
ocr_batch_size_bucket{device="gpu:1",le="2.0",stage="det"} 1.0
ocr_batch_size_bucket{device="gpu:1",le="4.0",stage="det"} 1.0
ocr_batch_size_bucket{device="gpu:1",le="+Inf",stage="det"} 1.0
ocr_batch_size_count{device="gpu:1",stage="det"} 1.0
ocr_batch_size_sum{device="gpu:1",stage="det"} 1.0
ocr_batch_size_bucket{device="gpu:0",le="1.0",stage="rec"} 0.0
ocr_batch_size_bucket{device="gpu:0",le="2.0",stage="rec"} 0.0
ocr_batch_size_bucket{device="gpu:0",le="4.0",stage="rec"} 0.0
ocr_batch_size_bucket{device="gpu:0",le="+Inf",stage="rec"} 2.0
ocr_batch_size_count{device="gpu:0",stage="rec"} 2.0
ocr_batch_size_sum{device="gpu:0",stage="rec"} 40.0
# TYPE ocr_batch_size_created gauge
ocr_batch_size_created{device="gpu:0",stage="det"} 1.7e+09
# TYPE ocr_queue_wait_seconds histogram
ocr_queue_wait_seconds_bucket{le="0.1",stage="det"} 5.0
ocr_queue_wait_seconds_bucket{le="+Inf",stage="det"} 7.0
ocr_queue_wait_seconds_count{stage="det"} 7.0
ocr_queue_wait_seconds_sum{stage="det"} 1.1
# TYPE ocr_requests counter
ocr_requests_total{endpoint="/ocr",status="200"} 9.0
"""


def test_percentile_interpolates_linearly() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    assert percentile([], 50) is None


def test_summarize_counts_and_orders_percentiles() -> None:
    outcomes = [Outcome(True, 2, latency_s=0.1 * (i + 1)) for i in range(10)]
    outcomes += [Outcome(False, 0, 9.0, "http_503"), Outcome(False, 0, 0.01, "ReadTimeout")]
    outcomes.append(Outcome(False, 0, 0.2, "http_503"))
    result = LevelResult(url="http://127.0.0.1:1", api="v1", concurrency=2)
    summarize(result, outcomes, wall_s=2.0)
    assert (result.requests, result.successes, result.pages) == (13, 10, 20)
    assert result.errors == {"ReadTimeout": 1, "http_503": 2}
    assert result.error_count == 3
    assert result.throughput_pages_s == pytest.approx(10.0)
    assert result.throughput_requests_s == pytest.approx(6.5)
    assert result.p50_s is not None
    assert result.p95_s is not None
    assert result.p99_s is not None
    assert result.p50_s <= result.p95_s <= result.p99_s <= (result.max_s or 0.0)
    assert result.max_s == pytest.approx(1.0)  # failures do not count towards latency


def _result(**fields: object) -> LevelResult:
    base: dict[str, object] = {"url": "http://127.0.0.1:1", "api": "paddlex", "concurrency": 4}
    return LevelResult(**{**base, **fields})  # type: ignore[arg-type]


def test_markdown_table_has_one_row_per_level() -> None:
    with_metrics = _result(
        requests=20,
        successes=16,
        errors={"http_503": 4},
        pages=32,
        wall_s=2.0,
        throughput_pages_s=16.0,
        throughput_requests_s=10.0,
        p50_s=0.1234,
        p95_s=0.2,
        p99_s=0.25,
        max_s=0.3,
        metrics={
            "det": StageMetrics(
                batches=4, mean_batch_size=2.5, queue_waits=8, mean_queue_wait_s=0.004
            ),
            "rec": StageMetrics(batches=2, mean_batch_size=12.0),
        },
    )
    empty = _result(concurrency=None, rate_per_s=0.5, truncated=True)
    table = markdown_table([with_metrics, empty]).splitlines()
    assert len(table) == 4
    assert table[0].startswith("| level | requests | ok | errors |")
    assert table[1].startswith("|---|---:|")
    cells = [cell.strip() for cell in table[2].strip("|").split("|")]
    assert cells[:4] == ["c=4", "20", "16", "4 (http_503: 4)"]
    assert cells[6:9] == ["2.00", "16.00", "10.00"]
    assert cells[9] == "0.123"
    assert cells[-2:] == ["det 2.50, rec 12.00", "det 4.00"]
    empty_cells = [cell.strip() for cell in table[3].strip("|").split("|")]
    assert empty_cells[0] == "rate=0.5/s (truncated)"
    assert empty_cells[9:] == ["-"] * 6


def test_stage_metrics_is_the_difference_between_scrapes() -> None:
    metrics = stage_metrics(BEFORE, AFTER)
    assert set(metrics) == {"det", "rec"}
    det = metrics["det"]
    assert det.batches == 4  # 3 more on gpu:0, 1 on the new gpu:1
    assert det.mean_batch_size == pytest.approx((8.0 + 1.0) / 4)
    assert det.batch_size_histogram == {"1": 1, "2": 2, "4": 1, "+Inf": 0}
    assert det.queue_waits == 4
    assert det.mean_queue_wait_s == pytest.approx(0.8 / 4)
    rec = metrics["rec"]
    assert (rec.batches, rec.mean_batch_size) == (2, 20.0)
    assert rec.batch_size_histogram["+Inf"] == 2
    assert rec.queue_waits == 0
    assert rec.mean_queue_wait_s is None


def test_stage_metrics_after_a_server_restart_counts_the_new_figures() -> None:
    metrics = stage_metrics(AFTER, BEFORE)  # counts went down: the server restarted
    assert metrics["det"].batches == 3
    assert metrics["det"].mean_batch_size == pytest.approx(2.0)


def test_parse_histograms_ignores_other_metrics_and_rejects_garbage() -> None:
    series = parse_histograms(AFTER, {"ocr_batch_size"})
    assert len(series) == 3
    assert all(name == "ocr_batch_size" for name, _ in series)
    assert stage_metrics("", "") == {}
    with pytest.raises(ValueError):  # noqa: PT011 - the parser's message is not ours
        stage_metrics("", "ocr_batch_size_count{stage=det 1\n")


def test_poisson_schedule_is_deterministic_for_a_seed() -> None:
    first = list(poisson_arrivals(2.0, seed=7, count=50))
    assert first == list(poisson_arrivals(2.0, seed=7, count=50))
    assert first != list(poisson_arrivals(2.0, seed=8, count=50))
    assert len(first) == 50
    assert all(b > a for a, b in itertools.pairwise(first))
    doubled = list(poisson_arrivals(4.0, seed=7, count=50))
    assert doubled == pytest.approx([t / 2 for t in first])
    many = list(poisson_arrivals(5.0, seed=1, count=20_000))
    assert many[-1] / len(many) == pytest.approx(1 / 5.0, rel=0.05)


def test_poisson_schedule_stops_at_the_duration() -> None:
    arrivals = list(poisson_arrivals(10.0, seed=0, duration_s=3.0))
    assert arrivals
    assert arrivals[-1] < 3.0
    assert 15 < len(arrivals) < 50
    with pytest.raises(ValueError, match="must end"):
        poisson_arrivals(1.0, seed=0)
    with pytest.raises(ValueError, match="rate"):
        poisson_arrivals(0.0, seed=0, count=1)


def test_requests_and_page_counts_per_api() -> None:
    pdf = Document("a.pdf", b"%PDF-1.4", "pdf", "application/pdf")
    paddlex = prepare_request("paddlex", pdf)
    assert paddlex.path == "/ocr"
    assert json.loads(paddlex.body) == {"file": "JVBERi0xLjQ=", "fileType": 0, "visualize": False}
    v1 = prepare_request("v1", pdf)
    assert (v1.path, v1.body, v1.headers["content-type"]) == (
        "/v1/ocr",
        b"%PDF-1.4",
        "application/pdf",
    )
    ok = {"errorCode": 0, "result": {"ocrResults": [{}, {}, {}]}}
    assert count_pages("paddlex", 200, ok) == (3, None)
    assert count_pages("paddlex", 200, {"errorCode": 500}) == (0, "errorCode_500")
    assert count_pages("paddlex", 503, None) == (0, "http_503")
    assert count_pages("v1", 200, {"pages": [{}]}) == (1, None)
    assert count_pages("v1", 200, {"nope": 1}) == (0, "invalid_body")


def test_load_documents_orders_directories_and_rejects_unknown_files(tmp_path: Path) -> None:
    (tmp_path / "b.PNG").write_bytes(b"png")
    (tmp_path / "a.pdf").write_bytes(b"pdf")
    (tmp_path / "notes.txt").write_text("skip me")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.jpeg").write_bytes(b"jpg")
    docs = load_documents([tmp_path])
    assert [Path(d.name).name for d in docs] == ["a.pdf", "b.PNG", "c.jpeg"]
    assert [(d.kind, d.content_type) for d in docs] == [
        ("pdf", "application/pdf"),
        ("image", "image/png"),
        ("image", "image/jpeg"),
    ]
    with pytest.raises(ValueError, match="unsupported"):
        load_documents([tmp_path / "notes.txt"])
    with pytest.raises(ValueError, match="no such file"):
        load_documents([tmp_path / "missing.png"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no input"):
        load_documents([tmp_path / "empty"])


def test_bucket_labels_name_integer_ranges() -> None:
    assert bucket_labels(["1", "2", "4", "8", "+Inf"]) == ["1", "2", "3-4", "5-8", ">8"]


def test_write_reports_writes_json_and_markdown(tmp_path: Path) -> None:
    result = _result(requests=2, successes=2, pages=2, wall_s=1.0, p50_s=0.1, p95_s=0.2)
    written = write_reports([result], tmp_path / "out", command=["ocr-loadtest", "--api", "v1"])
    names = {path.name for path in written}
    assert {"results.json", "results.md"} <= names
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert report["command"] == ["ocr-loadtest", "--api", "v1"]
    assert report["timestamp"].endswith("+00:00")
    assert report["levels"][0]["label"] == "c=4"
    assert report["levels"][0]["p95_s"] == 0.2
    assert "| c=4 |" in (tmp_path / "out" / "results.md").read_text()
    assert math.isclose(report["levels"][0]["wall_s"], 1.0)


def test_engine_limit_rounds_time_every_visit_and_keep_the_first_texts() -> None:
    calls: list[int] = []

    class Engine:
        def ocr(self, image: np.ndarray) -> SimpleNamespace:
            calls.append(int(image[0]))
            return SimpleNamespace(lines=[SimpleNamespace(text=f"page {int(image[0])}")])

    images = [np.full(1, i) for i in range(3)]
    limit, texts = measure(Engine(), images, warmup=1, rounds=2)  # type: ignore[arg-type]
    assert calls == [0, 0, 1, 2, 0, 1, 2]
    assert texts == [["page 0"], ["page 1"], ["page 2"]]
    assert (limit.pages, limit.lines) == (6, 3)
    assert limit.pages_per_s > 0
    assert 0 <= limit.median_page_s <= limit.wall_s
    with pytest.raises(ValueError, match="rounds"):
        measure(Engine(), images, rounds=0)  # type: ignore[arg-type]
