"""Every `ocr-bench` scenario end to end through the harness on tiny inputs, its expensive parts
(servers, models, engines) replaced by fakes at their seams: the command parses, the scenario
runs, and `results.json`, `results.md` and the plots come out with its rows. The seams against
the real thing: `tests/e2e/test_bench_harness.py` (ours through the `choice` scenario) and
`tests/integration/test_faster_paddle_peer.py`; every scenario was run for real once as it was
written (docs/performance.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest

from loadtest.bench import (
    baselines,
    batching,
    choice,
    cli,
    common,
    cpu_cost,
    cpu_engines,
    faithful_v6,
    faster_paddle_peer,
    header,
    int8_sensitivity,
    job_impact,
    languages,
    memory_peak,
    no_bf16,
    ocrmypdf_compare,
    output_cost,
    precision_check,
    precision_layouts,
    precision_startup,
    stage_cost,
    text_layers,
)
from loadtest.bench.common import Page, ServerRun
from loadtest.bench.ocrmypdf_tools import ToolFailed
from loadtest.result import LevelResult

TRUTHS = ("Delivery to Baker Street 221", "The quick brown fox")


def _image() -> np.ndarray:
    image = np.full((48, 320, 3), 255, np.uint8)
    cv2.putText(image, "ABC", (5, 35), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (0, 0, 0), 2)
    return image


def _pages(*_: Any, **__: Any) -> list[Page]:
    return [
        Page("en-tiny-p1", _image(), TRUTHS[0], "en"),
        Page("fr-tiny-p2", _image(), TRUTHS[1], "fr"),
    ]


def _page_set(*_: Any, **__: Any) -> list[tuple[str, np.ndarray, str]]:
    return [(p.label, p.image, p.truth) for p in _pages()]


class FakeServer:
    """What the scenarios use of a started server."""

    def __init__(self, *_: Any, **__: Any) -> None:
        self.url = "http://127.0.0.1:9"
        self.name = "fake"
        self.process = SimpleNamespace(pid=os.getpid())
        self.memory = SimpleNamespace(peak_bytes=2**20)
        self.stopped = False

    def wait_ready(self, path: str, timeout_s: float = 0) -> float:
        return 0.0

    def stop(self) -> None:
        self.stopped = True


def _level(concurrency: int) -> LevelResult:
    return LevelResult(
        url="http://127.0.0.1:9",
        api="v1",
        concurrency=concurrency,
        requests=2,
        successes=2,
        pages=2,
        wall_s=2.0,
        throughput_pages_s=1.0,
        p50_s=1.0,
        p95_s=1.5,
        mean_s=1.0,
        changed=0,
        correct_pages_s=1.0,
    )


def _server_run(server: Any, api: str, documents: Any, levels: list[int], **_: Any) -> ServerRun:
    texts = {Path(d.name).name: [TRUTHS[i % 2]] for i, d in enumerate(documents)}
    return ServerRun(texts, [_level(c) for c in levels], [0.5 for _ in levels])


@pytest.fixture(autouse=True)
def _quick_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(header, "commit", lambda root=header.REPO_ROOT: "abc")


def _run(tmp_path: Path, *argv: str, status: int = 0) -> dict[str, Any]:
    assert cli.main([*argv, "--out", str(tmp_path)]) == status
    report: dict[str, Any] = json.loads((tmp_path / "results.json").read_text())
    assert report["header"]["scenario"] == argv[0]
    assert (tmp_path / "results.md").read_text().startswith(f"# ocr-bench {argv[0]}")
    return report


def test_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(choice, "kind_pages", _pages)
    monkeypatch.setattr(choice, "start_ours", FakeServer)
    monkeypatch.setattr(choice, "measure_server", _server_run)
    monkeypatch.setattr(choice, "worker_precisions", lambda url: {"cpu#0": "bf16"})
    models = {
        "default": "PP-OCRv6_small",
        "models": [
            {"name": "PP-OCRv6_small", "devices": [{"precision": "bf16"}]},
            {"name": "PP-OCRv5_mobile", "devices": [{"precision": "f32"}]},
        ],
    }
    monkeypatch.setattr(choice, "served_models", lambda url: models)
    monkeypatch.setattr(faster_paddle_peer, "installed", lambda: True)

    def peer(size: str, threads: int, paths: list[Path]) -> dict[str, Any]:
        texts = {p.name: [TRUTHS[i % 2]] for i, p in enumerate(paths)}
        return {
            "version": "1.0.4",
            "config": {"threads": threads},
            "alone_pages_s": 2.0,
            "batch_pages_s": 3.0,
            "batch_correct_pages_s": 1.5,
            "batch_changed": 1,
            "alone_core_s_a_page": 0.4,
            "batch_core_s_a_page": 0.3,
            "texts": texts,
        }

    monkeypatch.setattr(faster_paddle_peer, "measure", peer)
    report = _run(
        tmp_path,
        "choice",
        "--pages",
        "2",
        "--precision",
        "auto",
        "--rapidocr-venv",
        str(tmp_path / "none"),
        status=1,  # RapidOCR's venv is missing: its row says so
    )
    rows = report["results"]["rows"]
    assert [r["label"] for r in rows][:2] == [
        "ours, PP-OCRv6_small (default set)",
        "ours, PP-OCRv5_mobile",
    ]
    assert rows[0]["scores"]["all"]["cer"] == 0.0
    assert rows[0]["levels"]["4"]["correct_pages_s"] == 1.0
    assert "make rapidocr-venv" in rows[2]["error"]
    text = (tmp_path / "results.md").read_text()
    assert (
        "| RapidOCR API (2 workers x 1 thread, OpenVINO), PP-OCRv6_small [auto] | not run" in text
    )
    assert "ours, PP-OCRv6_small (default set) [auto] / ours, PP-OCRv5_mobile [auto]" in text
    assert "ours, PP-OCRv6_small (default set) [auto] / faster-paddle small" in text
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "correct_pages_s.png").is_file()


def test_baselines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baselines, "real_pages", _pages)
    limit = {"pages_per_s": 0.5, "median_page_s": 2.0, "mean_page_s": 2.1}
    monkeypatch.setattr(
        baselines,
        "engine_limit",
        lambda *a, **k: {**limit, "texts": {p.file_name: ["x"] for p in _pages()}},
    )
    monkeypatch.setattr(baselines, "start_ours", FakeServer)
    monkeypatch.setattr(baselines, "measure_server", _server_run)
    monkeypatch.setattr(baselines, "worker_precisions", lambda url: {"cpu#0": "f32"})
    monkeypatch.setattr(baselines, "_int8_ready", lambda: False)

    def no_plugin(*_: Any) -> dict[str, Any]:
        raise RuntimeError("paddlex exited")

    monkeypatch.setattr(baselines, "measure_paddlex", no_plugin)
    report = _run(
        tmp_path,
        "baselines",
        "--servers",
        "ours,paddlex",
        "--precision",
        "f32",
        "--server-engines",
        "",
        "--levels",
        "1,4",
        "--threads",
        "2",
        status=1,
    )
    data = report["results"]
    assert [lv["concurrency"] for lv in data["ours_levels"]] == [1, 4]
    assert list(data["ours_precisions"]) == ["f32"]
    text = (tmp_path / "results.md").read_text()
    assert "machine limit" in text
    # A baseline that cannot start keeps the other rows and says why; the run counts as failed.
    assert data["not_run"] == {"paddlex": "RuntimeError: paddlex exited"}
    assert "- PaddleX basic serving: not run: RuntimeError: paddlex exited" in text


def test_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_engines, "real_pages", _pages)

    def limits(variants: Any, threads: int, paths: list[Path], rounds: int) -> dict[str, Any]:
        texts = {p.name: ["a"] for p in paths}
        return {
            v.name: {"pages_per_s": 1.0, "median_page_s": 1.0, "page_s": [1.0], "texts": texts}
            for v in variants
        }

    monkeypatch.setattr(cpu_engines, "engine_limits", limits)
    monkeypatch.setattr(
        cpu_engines, "server_level", lambda v, t, p, o, c, r: {"concurrency": c, "pages_s": 0.5}
    )
    report = _run(tmp_path, "engines", "--engines", "paddle,openvino", "--servers", "openvino")
    assert report["results"]["engines"]["openvino"]["server"] == [
        {"concurrency": 4, "pages_s": 0.5}
    ]
    assert "| openvino | 1.000 | 1.00 | c=4 0.500 |" in (tmp_path / "results.md").read_text()


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="scripts/system-deps.sh")
def test_ocrmypdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("img2pdf")
    ok, jpeg = cv2.imencode(".jpg", _image())
    assert ok
    scans = [
        ocrmypdf_compare.Scan(
            label="a", kind="english", lang="en", jpeg=jpeg.tobytes(), truth="ABC"
        )
    ]
    monkeypatch.setattr(ocrmypdf_compare, "make_scans", lambda pages, dpi, askew: scans)
    monkeypatch.setattr(
        ocrmypdf_compare, "OurServer", lambda **_: SimpleNamespace(ready_s=1.0, stop=lambda: None)
    )

    def fails(path: Path) -> tuple[Path, float]:
        raise ToolFailed("ours", "no models here")

    monkeypatch.setattr(
        ocrmypdf_compare, "tool_runs", lambda args, server: [("ours", "fake ours", fails)]
    )
    report = _run(tmp_path, "ocrmypdf", "--pages", "1", "--servers", "ours", status=1)
    assert report["results"]["rows"] == [{"tool": "fake ours", "error": "no models here"}]
    assert "| fake ours | failed: no models here |" in (tmp_path / "results.md").read_text()


def test_languages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = {
        "turned": {"pages": ["a"], "0": 0.01, "90": 0.01, "180": 0.012, "270": 0.01},
        "languages": {
            "fr": {
                "pages": [3],
                "cer": {"PP-OCRv6_small": 0.002, "v5": 0.02},
                "models": {"PP-OCRv6_small": "v6 det+rec", "v5": "v5 det+rec"},
                "picked": "PP-OCRv6_small",
            },
            "japan": {"missing": "/nowhere.pdf"},
        },
    }
    asked: list[str] = []

    def measure(pages: int, threads: int, precision: str, *, turned: bool) -> dict[str, Any]:
        asked.append(precision)
        return got

    monkeypatch.setattr(languages, "measure", measure)
    _run(tmp_path, "languages", "--pages", "1", "--precision", "auto,f32", "--table")
    assert asked == ["auto", "f32"]
    text = (tmp_path / "results.md").read_text()
    assert "PP-OCRv6_small 0.20% (picked), v5 2.00%" in text
    assert "'fr': {'v6 det+rec': 0.20, 'v5 det+rec': 2.00}," in text


def test_faithful_v6(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [("a.pdf:p1", np.zeros((4, 4, 3), np.uint8), "one two")]
    monkeypatch.setattr(faithful_v6, "default_bundle", lambda: SimpleNamespace(
        det=SimpleNamespace(model_name="PP-OCRv6_small_det"),
        rec=SimpleNamespace(model_name="PP-OCRv6_small_rec"),
    ))  # fmt: skip
    monkeypatch.setattr(faithful_v6, "real_page_set", lambda n: pages[:n])
    monkeypatch.setattr(faithful_v6, "our_reader", lambda b, t, backend: lambda im: ["one two"])
    monkeypatch.setattr(faithful_v6, "reference_reader", lambda b, d, t: lambda im: ["one tw0"])
    report = _run(tmp_path, "faithful-v6", "--pages", "1", status=1)  # 14% apart: not within
    assert report["results"]["total"]["within"] is False
    assert "a.pdf:p1: 0.00% / 16.67%" in (tmp_path / "results.md").read_text()
    monkeypatch.setattr(faithful_v6, "reference_reader", lambda b, d, t: lambda im: ["one two"])
    report = _run(tmp_path, "faithful-v6", "--pages", "1")
    assert report["results"]["total"]["within"] is True


def test_batching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "real_page_set", _page_set)

    class Engine:
        def __init__(self, config: Any) -> None:
            pass

        def load(self) -> None:
            pass

    monkeypatch.setattr(batching, "LocalEngine", Engine)
    monkeypatch.setattr(
        batching,
        "read_in_process",
        lambda engine, pages: [
            batching.ModeTexts(mode, {label: [truth] for label, _, truth in pages})
            for mode in batching.MODES
        ],
    )
    report = _run(tmp_path, "batching", "--pages", "2", "--skip-servers")
    assert report["results"]["within_bound"] is True
    assert "| exact |" in (tmp_path / "results.md").read_text()


def test_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision_check, "real_pages", _pages)
    monkeypatch.setattr(precision_check, "cpu_capabilities", lambda: ["BF16", "FP32"])

    def engine_run(out: Path, precision: str, pages_dir: Path, threads: int) -> dict[str, Any]:
        return {"texts": {f"{p.label}.png": [p.truth] for p in _pages()}, "pages_per_s": 1.0}

    monkeypatch.setattr(precision_check, "_engine_run", engine_run)
    report = _run(tmp_path, "precision", "--pages", "2")
    assert report["results"]["bf16_within"] is True
    assert "auto within, 1.00x f32" in (tmp_path / "results.md").read_text()


def test_precision_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision_layouts, "real_page_set", lambda n: _page_set())
    monkeypatch.setattr(precision_layouts, "synthetic_pages", dict)

    def measure(layouts: Any, pages: Any, rounds: int, threads: int, models: Any) -> list[Any]:
        assert rounds == 2
        scores = {"en": {"cer": 0.01, "merged_words": 0}}
        return [{"layout": str(x), "pages_s": 1.0, "scores": scores} for x in layouts]

    monkeypatch.setattr(precision_layouts, "measure", measure)
    _run(tmp_path, "precision-layouts", "--layouts", "f32/f32,bf16/bf16!", "--repeats", "2")
    text = (tmp_path / "results.md").read_text()
    assert "- bf16/bf16!  1.000 pages/s | en CER 1.00% merged 0" in text


def test_precision_startup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []

    def start(out: Path, label: str, precision: str, cache_dir: Path) -> dict[str, Any]:
        started.append(label)
        checks = {"rec": {"model": "m", "checked": False, "note": "no check set"}}
        return {"label": label, "ready_s": 1.0, "cpu_s": 2.0, "precision": {}, "checks": checks}

    monkeypatch.setattr(precision_startup, "start_once", start)
    _run(tmp_path, "precision-startup", "--repeats", "1")
    assert started == [
        "auto, cold (the check measures)",
        "f32 forced (no check)",
        "auto, warm (cached) #1",
        "f32 forced #1",
    ]
    text = (tmp_path / "results.md").read_text()
    assert "| auto, warm (cached) #1 | 1.0 | 2.0 |  |" in text
    assert "| m (rec) | | | | | not checked: no check set |" in text


def test_no_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(no_bf16, "kind_pages", _pages)
    monkeypatch.setattr(no_bf16, "synthetic_pages", dict)
    seen: list[Any] = []

    def measure(variants: Any, pages: Any, rounds: int, *_: Any) -> list[Any]:
        seen.extend(variants)
        scores = common.text_scores(pages, {})
        return [
            {
                "variant": str(v),
                "cpu_s_page": 2.0,
                "cpu_ratio": 1.0,
                "pages_s": 0.5,
                "det_cpu_s_page": 0.5,
                "rec_cpu_s_page": 1.5,
                "scores": scores,
                "synthetic_merged_words": 0,
            }
            for v in variants
        ]

    monkeypatch.setattr(no_bf16, "measure", measure)
    _run(tmp_path, "no-bf16", "--variants", "v5:f32/f32,v6:int8/int8@max:960")
    assert [str(v) for v in seen] == ["v5:f32/f32", "v6:int8/int8@max:960"]
    assert seen[1].limit_side_len == 960
    assert (
        "| v6:int8/int8@max:960 | 2.000 | 1.00x | 0.500 | 1.500 |"
        in (tmp_path / "results.md").read_text()
    )
    with pytest.raises(ValueError, match="a variant is SET:DET/REC"):
        no_bf16.Variant.parse("v7:f32/f32")


def test_int8_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(int8_sensitivity, "real_page_set", lambda n: _page_set())
    monkeypatch.setattr(int8_sensitivity, "synthetic_pages", dict)

    class Tries:
        int8_file = tmp_path / "int8.xml"

        def __init__(self, *_: Any) -> None:
            pass

        def read(self, model: Any = None) -> dict[str, tuple[float, int]]:
            floated = len(model or [])  # `in_float` below hands the names back
            return {"zh": (0.05 - 0.01 * floated, 0), "en": (0.01, 0)}

    monkeypatch.setattr(int8_sensitivity, "RecogniserTries", Tries)
    monkeypatch.setattr(int8_sensitivity, "in_float", lambda path, names: list(names))
    monkeypatch.setattr(
        int8_sensitivity,
        "import_engine",
        lambda *a: SimpleNamespace(Core=lambda: SimpleNamespace(read_model=lambda path: None)),
    )
    monkeypatch.setattr(int8_sensitivity, "quantised_inputs", lambda model: {"a": [], "b": []})
    report = _run(tmp_path, "int8-layers", "--layers", "a;a,b", "--top", "1")
    assert report["results"]["ranked"] == ["a,b", "a"]
    assert "top 1 in float" in (tmp_path / "results.md").read_text()
    with pytest.raises(SystemExit, match=r"not quantised in .*: zz; its quantised layers: a, b"):
        cli.main(["int8-layers", "--layers", "a;zz", "--out", str(tmp_path)])
    assert int8_sensitivity.gained({"en": (0.01, 2), "synthetic": (0.0, 1)}) == (0.0, 0.01, 3)


def test_job_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_impact, "real_pages", _pages)
    monkeypatch.setattr(job_impact, "start_ours", FakeServer)
    alone = {"p50_s": 1.0, "p95_s": 2.0, "pages_per_s": 1.0, "errors": {}}
    monkeypatch.setattr(job_impact, "_closed_loop", lambda *a: alone)
    beside = {**alone, "pages_per_s": 0.8, "job_pages_done": 3, "job_pages_failed": 0}
    monkeypatch.setattr(
        job_impact, "beside_busy_requests", lambda *a, **k: {**beside, "seconds": 4.0}
    )
    report = _run(tmp_path, "job-share", "--min-shares", "0,0.1", "--requests", "2")
    assert list(report["results"]) == ["0", "0.1"]
    assert (
        "| 0.1 | 1.000 | 2.00 | 0.800 | 1.00 | 2.00 | 3 | 4.0 | - |"
        in (tmp_path / "results.md").read_text()
    )


def test_memory_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def measure(
        pages: int, inches: float, budget: int, copies: list[int], out: Path, inflight: int
    ) -> list[dict[str, object]]:
        return [
            {
                "budget_mib": budget or 512,
                "concurrent": c,
                "statuses": [200],
                "seconds": 1.0,
                "idle_mib": 300,
                "peak_total_mib": 700,
                "within_budget": True,
                "samples": 9,
            }
            for c in copies
        ]

    monkeypatch.setattr(memory_peak, "measure", measure)
    report = _run(tmp_path, "memory-peak", "--levels", "1,8", "--budget-mib", "0,768")
    assert len(report["results"]["runs"]) == 4
    assert "samples" not in report["results"]["runs"][0]
    assert "| 768 | 8 | [200] | 1.0 | 300 | 700 | True |" in (tmp_path / "results.md").read_text()


def test_host_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_cost, "real_page_set", _page_set)
    got = {
        "pages": 2,
        "per_page_mean": {"cpu_prepare_s": 0.01, "lines": 20},
        "cpu_worker_core_s": 0.05,
        "device_worker_host_core_s": 0.02,
        "shm_bytes": 2**20,
    }
    monkeypatch.setattr(cpu_cost, "measure", lambda pages, config: got)
    _run(tmp_path, "host-cost", "--pages", "2")
    assert "CPU worker 0.0500, device worker 0.0200" in (tmp_path / "results.md").read_text()


def test_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output_cost, "scans", lambda pages, dpi: [b"jpeg"])

    async def measure(url: str, pages: Any, formats: Any, rounds: int, c: int) -> dict[str, Any]:
        assert (url, rounds, c) == ("http://x", 3, 4)
        return {f: {"pages_per_s": 1.0, "vs_json": 1.0, "mean_bytes": 2048.0} for f in formats}

    monkeypatch.setattr(output_cost, "measure", measure)
    _run(tmp_path, "outputs", "--url", "http://x", "--formats", "json,pdf")
    assert "| pdf | 1.00 | 100.0% | 2 KiB |" in (tmp_path / "results.md").read_text()


def test_text_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scan = text_layers.Scan(
        label="a", kind="askew", lang="en", angle_deg=2.5, jpeg=b"jpeg", truth="ABC"
    )
    monkeypatch.setattr(text_layers, "askew_scans", lambda pages, dpi: [scan])
    monkeypatch.setattr(text_layers, "table_scans", lambda dpi: [])
    monkeypatch.setattr(text_layers, "scans_pdf", lambda scans, dpi: b"%PDF")
    monkeypatch.setattr(text_layers, "our_texts", lambda url, scans: ["ABC"])
    monkeypatch.setattr(text_layers, "our_pages", lambda url, scans: [{}])
    asked: list[str] = []

    def pdfs(url: str, scans: Any, query: str = "") -> list[bytes]:
        asked.append(f"{url} {query}")
        return [b"%PDF"]

    def score(name: str, *_: Any) -> dict[str, Any]:
        return {"row": name, **{f"{k}@{kind or 'all'}": 0.5 for _, k, kind in text_layers._COLUMNS}}

    monkeypatch.setattr(text_layers, "request_pdfs", pdfs)
    monkeypatch.setattr(text_layers, "score_row", score)
    args = ("--url", "http://x", "--servers", "format=pdf,format=pdf deskew", "--pages", "1")
    report = _run(tmp_path, "text-layers", *args)
    assert asked == ["http://x ", "http://x &deskew=true"]
    assert [r["row"] for r in report["results"]["rows"]] == ["format=pdf", "format=pdf deskew"]
    table = (tmp_path / "results.md").read_text()
    assert "| format=pdf deskew | 50.0% | 0.500 | 0.500 | 50.0% |" in table


def test_stage_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = tmp_path / "pages"
    pages.mkdir()
    for name in ("a", "b"):
        cv2.imwrite(str(pages / f"{name}.png"), np.zeros((4, 4, 3), np.uint8))
        (pages / f"{name}.txt").write_text(f"{name} text", encoding="utf-8")

    class Engine(stage_cost.Target):
        def tree_cpu_s(self) -> dict[int, float]:
            return {1: 2.0 * len(self.passes)}

        def read(self, page_files: Any, concurrency: int) -> tuple[float, dict[str, list[str]]]:
            return 4.0, {p.name: [p.stem + " text"] for p in page_files}

        def stop(self) -> None:
            return None

    monkeypatch.setattr(stage_cost, "start_engine", lambda label, spec, n: Engine(label))
    out = tmp_path / "out"
    assert cli.main(["stage-cost", "--pages-dir", str(pages), "--engine", "e=x.toml",
                     "--rounds", "1", "--out", str(out)]) == 0  # fmt: skip
    report = json.loads((out / "results.json").read_text())
    assert report["results"]["e"]["cer"] == 0.0
    assert len(report["results"]["e"]["passes"]) == 1
    assert "| e | 0.500 | 0.500 |" in (out / "results.md").read_text()


def test_embed_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = _run(tmp_path, "embed-memory", "--side", "64")  # the real render, two processes
    rows = report["results"]["rows"]
    assert [row["format"] for row in rows] == ["jpeg", "png"]
    assert all(row["side"] == 64 and row["output_bytes"] > 0 for row in rows)
    assert "| png | 64 |" in (tmp_path / "results.md").read_text()


def test_every_scenario_has_a_smoke_test_here() -> None:
    tested = {
        name.removeprefix("test_").replace("_", "-")
        for name in globals()
        if name.startswith("test_")
    }
    assert set(cli.scenarios()) <= tested


def test_text_scores_sum_over_characters_per_kind() -> None:
    pages = [Page("a", _image(), "abcdefghij", "en"), Page("b", _image(), "xy", "fr")]
    scores = common.text_scores(pages, {"a.png": ["abcdefghij"], "b.png": ["x", "z"]})
    assert scores["all"]["cer"] == pytest.approx(1 / 12, abs=1e-5)  # rounded to 5 places
    assert scores["fr"] == {"pages": 1, "cer": 0.5, "merged_words": 0, "word_f1": 0.0}
    assert scores["en"]["word_f1"] == 1.0


@pytest.mark.skipif(
    not all(p.is_file() for p in common.LANGUAGE_PDFS.values())
    or not common.pdf_pages.find_real_pdfs(),
    reason="Debian's doc PDFs (scripts/system-deps.sh)",
)
def test_kind_pages_spread_over_the_kinds_and_send_poor_scans_as_jpeg(tmp_path: Path) -> None:
    pages = common.kind_pages(5, ["en", "zh", "degraded", "fr"], dpi=40)
    assert [p.kind for p in pages] == ["en", "en", "zh", "degraded", "fr"]
    assert len({p.label for p in pages}) == 5
    scan = pages[3]
    assert scan.jpeg_quality == common.DEGRADED_JPEG_QUALITY
    assert scan.file_name.endswith(".jpg")
    paths = common.write_pages(pages, tmp_path)
    assert [p.suffix for p in paths] == [".png", ".png", ".png", ".jpg", ".png"]
    assert all(p.truth.strip() for p in pages)
    with pytest.raises(ValueError, match="unknown page kinds"):
        common.kind_pages(1, ["xx"])
