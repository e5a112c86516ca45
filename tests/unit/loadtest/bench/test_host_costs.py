"""`ocr-bench baselines`: the CPU side of a level, core-seconds and shared-memory bytes per page
from two `/metrics` scrapes (`loadtest.server_metrics.host_costs`)."""

from __future__ import annotations

from loadtest.bench.baselines_report import host_line
from loadtest.server_metrics import host_costs

BEFORE = """\
# TYPE ocr_process_cpu_seconds gauge
ocr_process_cpu_seconds{process="main"} 10.0
ocr_process_cpu_seconds{process="cpu_workers"} 20.0
ocr_process_cpu_seconds{process="cpu#0"} 100.0
# TYPE ocr_shm_bytes_total counter
ocr_shm_bytes_total{stage="det",direction="to_device"} 1000.0
"""

AFTER = """\
# TYPE ocr_process_cpu_seconds gauge
ocr_process_cpu_seconds{process="main"} 10.5
ocr_process_cpu_seconds{process="cpu_workers"} 22.0
ocr_process_cpu_seconds{process="cpu#0"} 140.0
ocr_process_cpu_seconds{process="cpu#1"} 4.0
# TYPE ocr_shm_bytes_total counter
ocr_shm_bytes_total{stage="det",direction="to_device"} 9000.0
ocr_shm_bytes_total{stage="det",direction="from_device"} 4000.0
"""


def test_per_page_deltas_by_process_group_and_stage() -> None:
    costs = host_costs(BEFORE, AFTER, pages=4)
    assert costs is not None
    # A device worker new since the first scrape (restarted) counts in full.
    assert costs.core_s == {"cpu_workers": 0.5, "devices": 11.0, "main": 0.125}
    assert costs.shm_bytes == {
        "det from_device": 1000,
        "det to_device": 2000,
        "total": 3000,
    }
    line = host_line(
        {"concurrency": 4, "host": {"core_s": costs.core_s, "shm_bytes": costs.shm_bytes}}
    )
    assert line.startswith("- ours at concurrency 4, per page: core-s cpu_workers 0.500")


def test_nothing_without_pages_or_from_an_older_server() -> None:
    assert host_costs(BEFORE, AFTER, pages=0) is None
    assert host_costs("", "# TYPE ocr_pages counter\nocr_pages_total 3.0\n", pages=3) is None
