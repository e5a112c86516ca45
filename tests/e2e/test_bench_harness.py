"""`ocr-bench choice` against a real `ocr-serve` it starts itself (the fake engine backend, so
that the test is about the harness, not the models): the seam the scenarios' smoke tests fake
(`start_ours`, `/v1/models`, `measure_server`) on the real server, one page, one level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.bench import cli
from serving.convert import pdf_pages

pytestmark = pytest.mark.skipif(
    not pdf_pages.find_real_pdfs(), reason="Debian's doc PDFs (scripts/system-deps.sh)"
)


def test_choice_reads_each_set_of_a_real_server_and_counts_its_correct_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bench starts the server with the environment it has: every engine the fake one.
    monkeypatch.setenv("OCR_ENGINE__CPU_BACKEND", "fake")
    monkeypatch.setenv("OCR_WORKERS__CPU_INSTANCES", "1")
    monkeypatch.setenv("OCR_WORKERS__CPU_WORKERS", "1")
    argv = ["choice", "--servers", "ours", "--pages", "1", "--kinds", "en", "--levels", "1"]
    argv += ["--precision", "auto", "--sets", "PP-OCRv6_small", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    rows = report["results"]["rows"]
    default = next(row for row in rows if row["default_set"])
    assert {row["set"] for row in rows} == {default["set"], "PP-OCRv6_small"}
    for row in rows:
        level = row["levels"]["1"]
        assert level["failed"] == 0
        assert level["requests"] == 1
        # The fake engine answers a page alike every time: the one page is correct.
        assert level["correct_pages_s"] == level["throughput_pages_s"] > 0
        assert level["core_s_a_page"] > 0  # the server tree's CPU, measured
        assert row["scores"]["en"]["pages"] == 1
    assert report["header"]["load"]["wall_s"] > 0
    assert "(default set) [auto]" in (tmp_path / "results.md").read_text()
