"""`ocr-bench baselines`' summary: one row per measured level, ratios against each baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.accuracy import pages_cer
from loadtest.bench import baselines, common
from loadtest.bench.baselines_report import markdown


def _level(concurrency: int, pages_s: float, p50_s: float) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "throughput_pages_s": pages_s,
        "p50_s": p50_s,
        "p95_s": p50_s * 2,
        "mean_s": p50_s * 1.1,
        "errors": {"503": 1} if concurrency == 8 else {},
    }


def _paddlex(paddle: str, run_mode: str, pages_s: float, rss: int) -> dict[str, Any]:
    levels = [_level(1, pages_s, 5.0), _level(4, pages_s, 20.0)]
    return {
        "paddle": paddle,
        "run_mode": run_mode,
        "levels": levels,
        "cer": 0.0084,
        "peak_rss_mb": rss,
    }


REPORT: dict[str, Any] = {
    "engine": {"pages_per_s": 0.2, "median_page_s": 4.0, "mean_page_s": 4.4, "cer": 0.0084},
    "ours_levels": [_level(1, 0.18, 4.4), _level(4, 0.19, 19.0), _level(8, 0.2, 38.0)],
    "ours_cer": 0.0085,
    "ours_peak_rss_mb": 2100,
    "paddlex": _paddlex("3.2.2", "mkldnn", 0.16, 1700),
    "paddlex_default": _paddlex("3.3.1", "paddle", 0.038, 1500),
}


def test_rows_and_ratios_for_both_paddlex_installs() -> None:
    text = markdown(REPORT)
    assert "| ours | 4 | 0.190 | 0.95 | 19.00 | 38.00 | 0 |" in text
    assert "| ours | 8 | 0.200 | 1.00 | 38.00 | 76.00 | 1 |" in text
    assert "| PaddleX basic serving (Paddle 3.2.2, oneDNN) | 4 | 0.160 | 0.80 |" in text
    assert (
        "| PaddleX basic serving, default install (Paddle 3.3.1, oneDNN off) | 1 | 0.038 | 0.19 |"
    ) in text
    assert "ours / PaddleX basic serving (Paddle 3.2.2, oneDNN) at concurrency 4: 1.19x" in text
    assert "(Paddle 3.3.1, oneDNN off) at concurrency 4: 5.00x" in text
    assert "ours p50 at concurrency 1 / engine median page time: 1.10 (goal <= 1.00)" in text
    assert "ours mean latency at concurrency 1 / engine mean page time: 1.10" in text
    assert "- CER on the page set: engine 0.0084, ours 0.0085" in text
    assert "PaddleX basic serving, default install (Paddle 3.3.1, oneDNN off) 1500 MiB" in text


def test_without_paddlex_only_ours() -> None:
    report = {k: v for k, v in REPORT.items() if not k.startswith("paddlex")}
    text = markdown(report)
    assert "PaddleX" not in text
    assert "peak RSS of all server processes: ours 2100 MiB" in text


def test_rapidocr_row_ratio_and_accuracy() -> None:
    rapidocr = _paddlex("", "", 0.25, 900)
    del rapidocr["paddle"], rapidocr["run_mode"]
    rapidocr |= {"onnxruntime": "1.32.0", "rapidocr": "3.10.0", "cer": 0.0091}
    text = markdown({**REPORT, "rapidocr": rapidocr})
    assert "| RapidOCR API server (ONNX Runtime 1.32.0) | 4 | 0.250 | 1.25 |" in text
    assert "ours / RapidOCR API server (ONNX Runtime 1.32.0) at concurrency 4: 0.76x" in text
    assert "RapidOCR API server (ONNX Runtime 1.32.0) 0.0091" in text
    assert "RapidOCR API server (ONNX Runtime 1.32.0) 900 MiB" in text


def test_rapidocr_rows_on_both_engines() -> None:
    onnxruntime = {"onnxruntime": "1.32.0", "rapidocr": "3.10.0", "cer": 0.0084}
    openvino = {"openvino": "2026.4.1", "rapidocr": "3.10.0", "cer": 0.0085}
    for run, pages_s in ((onnxruntime, 0.1), (openvino, 0.2)):
        run |= {"levels": [_level(1, pages_s, 5.0), _level(4, pages_s, 20.0)], "peak_rss_mb": 900}
    text = markdown({**REPORT, "rapidocr": onnxruntime, "rapidocr_openvino": openvino})
    assert "| RapidOCR API server (ONNX Runtime 1.32.0) | 4 | 0.100 | 0.50 |" in text
    assert "| RapidOCR API server (OpenVINO 2026.4.1 f32) | 4 | 0.200 | 1.00 |" in text
    assert "ours / RapidOCR API server (ONNX Runtime 1.32.0) at concurrency 4: 1.90x" in text
    assert "ours / RapidOCR API server (OpenVINO 2026.4.1 f32) at concurrency 4: 0.95x" in text
    assert "RapidOCR API server (OpenVINO 2026.4.1 f32) 0.0085" in text


def test_a_row_for_our_server_on_each_other_cpu_engine() -> None:
    report = {**REPORT, "ours_engines": {"paddle": [_level(4, 0.1, 30.0)]}}
    assert "| ours, CPU engine paddle | 4 | 0.100 | 0.50 | 30.00 | 60.00 | 0 |" in markdown(report)


def test_cer_over_all_pages_weighs_pages_by_their_characters() -> None:
    truths = {"a.png": "abcdefghij", "b.png": "xy"}
    texts = {"a.png": ["abcdefghij"], "b.png": ["x", "z"]}  # "xz" without whitespace: 1 edit
    assert pages_cer(truths, texts) == pytest.approx(1 / 12)  # not the mean of 0 and 1/2
    assert pages_cer({}, {}) == 0.0


def test_a_baseline_that_fails_requests_is_compared_at_its_fastest_level_without_errors() -> None:
    openvino = {"openvino": "2026.4.1", "rapidocr": "3.10.0", "cer": 0.0085, "peak_rss_mb": 900}
    failing = _level(4, 0.1, 6.0) | {"errors": {"http_500": 12, "ReadError": 3}, "requests": 16}
    openvino["levels"] = [_level(1, 0.25, 4.0), failing]
    text = markdown({**REPORT, "rapidocr_openvino": openvino})
    label = "RapidOCR API server (OpenVINO 2026.4.1 f32)"
    assert f"ours / {label} at concurrency 4" not in text
    # ours at 4: 0.19 pages/s; RapidOCR's only level without errors: 0.25.
    assert (
        f"- ours at concurrency 4 / {label} at concurrency 1, its fastest level without errors: "
        "0.76x" in text
    )
    assert f"- {label} at concurrency 4: 15 of 16 requests failed" in text


def test_ratios_count_correct_pages_and_say_what_failed_or_changed() -> None:
    """Issue 28: each side's pages/s counting only answers with the text it gives a lone page."""
    ours = [
        _level(1, 0.5, 2.0) | {"changed": 0, "correct_pages_s": 0.5},
        _level(4, 0.9, 4.0) | {"changed": 0, "correct_pages_s": 0.9},
    ]
    openvino = {"openvino": "2026.4.1", "precision": "f32, its default", "rapidocr": "3.10.0"}
    openvino |= {"cer": 0.0085, "peak_rss_mb": 900}
    failing = _level(4, 1.38, 3.0) | {
        "errors": {"http_500": 3},
        "requests": 20,
        "changed": 3,
        "correct_pages_s": 1.14,
    }
    openvino["levels"] = [_level(1, 0.97, 1.0) | {"changed": 0, "correct_pages_s": 0.97}, failing]
    int8 = {
        "precision": {},
        "levels": [_level(4, 1.8, 2.0) | {"changed": 1, "correct_pages_s": 1.7}],
    }
    text = markdown(
        {**REPORT, "ours_levels": ours, "rapidocr_openvino": openvino}
        | {"ours_precisions": {"int8": int8}}
    )
    label = "RapidOCR API server (OpenVINO 2026.4.1 f32, its default)"
    assert f"| {label} | 4 | 1.380 | 6.90 | 3.00 | 6.00 | 3 | 3 | 1.140 |" in text
    assert f"- ours / {label} at concurrency 4, correct pages/s: 0.79x (0.900 / 1.140" in text
    assert (
        f"- {label} at concurrency 4: of 20 requests 3 failed ({{'http_500': 3}}), 3 answered "
        "with another text than it gives the page alone"
    ) in text
    assert (
        '| ours, openvino_precision = "int8" | 4 | 1.800 | 9.00 | 2.00 | 4.00 | 0 | 1 | 1.700 |'
        in text
    )


ONE_THREAD = {"pages_per_s": 0.12, "median_page_s": 7.5, "mean_page_s": 7.6, "cer": 0.0084}


def test_machine_limit_is_cores_times_the_one_thread_engine_limit() -> None:
    """Issue 28: ours at concurrency 4 against cores x the one-thread in-process limit, and ours
    p50 at concurrency 1 against the cores-thread in-process median page."""
    text = markdown({**REPORT, "cpu_threads": 2, "engine_one_thread": ONE_THREAD})
    rows = text.splitlines()
    engine = rows.index(
        "| engine limit (in process, 2 threads) | 1 | 0.200 | 1.00 | 4.00 (median page) | | | | |"
    )
    assert rows[engine + 1] == (
        "| engine limit (in process, 1 thread) | 1 | 0.120 | 0.60 | 7.50 (median page) | | | | |"
    )
    # 2 cores x 0.12 = 0.24 pages/s; ours at concurrency 4: 0.19 pages/s, 0.19 / 0.24 = 0.79.
    assert (
        "- machine limit: 2 cores x one-thread engine limit 0.120 = 0.240 pages/s; "
        "ours at concurrency 4 / machine limit: 0.79 (goal >= 0.90)"
    ) in rows
    # 4.4 s / 4.0 s, the two-thread engine's median page, not the one-thread one's 7.5 s.
    assert (
        "- ours p50 at concurrency 1 / 2-thread in-process median page time: 1.10 (goal <= 1.00)"
    ) in rows


def test_on_one_thread_the_engine_limit_is_the_one_thread_limit() -> None:
    text = markdown({**REPORT, "cpu_threads": 1})
    assert "| engine limit (in process, 1 thread) | 1 | 0.200 | 1.00 |" in text
    assert text.count("engine limit (in process") == 1
    assert (
        "- machine limit: 1 cores x one-thread engine limit 0.200 = 0.200 pages/s; "
        "ours at concurrency 4 / machine limit: 0.95 (goal >= 0.90)"
    ) in text


def test_reports_without_the_one_thread_engine_limit_still_render() -> None:
    """Reports saved before issue 28 had no one-thread run, some no thread count either."""
    text = markdown({**REPORT, "cpu_threads": 4})
    assert "| engine limit (in process, 4 threads) | 1 | 0.200 | 1.00 |" in text
    assert "1 thread)" not in text
    assert "machine limit" not in text
    assert "ours p50 at concurrency 1 / 4-thread in-process median page time: 1.10" in text
    old = markdown(REPORT)
    assert "| engine limit (in process) | 1 | 0.200 | 1.00 |" in old
    assert "machine limit" not in old


def test_no_machine_limit_line_without_ours_at_concurrency_4() -> None:
    ours = [lv for lv in REPORT["ours_levels"] if lv["concurrency"] != 4]
    report = {**REPORT, "cpu_threads": 2, "engine_one_thread": ONE_THREAD, "ours_levels": ours}
    text = markdown(report)
    assert "| engine limit (in process, 1 thread) | 1 | 0.120 |" in text
    assert "machine limit" not in text


def test_engine_limit_runs_the_engine_with_the_threads_and_reads_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_run(command: list[str], check: bool) -> None:
        assert check
        calls.append(command)
        config = Path(command[command.index("--config") + 1])
        assert config.read_text() == "[engine]\ncpu_threads = 1\n"
        result = {**ONE_THREAD, "texts": {"a.png": ["abcd"]}}
        del result["cer"]
        Path(command[command.index("--json") + 1]).write_text(json.dumps(result))

    monkeypatch.setattr(common.subprocess, "run", fake_run)
    engine = baselines._engine_limit(tmp_path, "engine-1thread", 1, 3, {"a.png": "abce"})
    [command] = calls
    assert command[1:3] == ["-m", "loadtest.engine_limit"]
    assert command[command.index("--config") + 1] == str(tmp_path / "engine-1thread.toml")
    assert command[command.index("--json") + 1] == str(tmp_path / "engine-1thread.json")
    assert command[command.index("--pages-dir") + 1] == str(tmp_path / "pages")
    assert command[command.index("--rounds") + 1] == "3"
    assert engine["pages_per_s"] == 0.12
    assert engine["median_page_s"] == 7.5
    assert engine["cer"] == pytest.approx(0.25)
    assert "texts" not in engine
