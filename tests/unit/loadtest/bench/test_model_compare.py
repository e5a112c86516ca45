"""The PP-OCRv5 and PP-OCRv6 comparison: its configs, accuracy and table (model_compare.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from loadtest.bench.model_compare import MODEL_SETS, accuracy, config_text, markdown
from serving.config import AppConfig, load_config

pytestmark = pytest.mark.unit


def test_each_model_set_is_a_valid_config(tmp_path: Path) -> None:
    for key, models in MODEL_SETS.items():
        path = tmp_path / f"{key}.toml"
        path.write_text(config_text(models, "openvino", 2, tmp_path / "jobs"))
        config: AppConfig = load_config(path)
        assert (config.models.det, config.models.rec) == (models.det, models.rec)
        assert config.engine.cpu_backend == "openvino"
        assert config.pipeline.det.limit_side_len == models.limit_side_len
        assert tomllib.loads(path.read_text())["workers"]["devices"] == ["cpu"]


def test_accuracy_sums_over_pages() -> None:
    truths = {"a.png": "alpha beta", "b.png": "gamma"}
    texts = {"a.png": ["alpha", "beta"], "b.png": ["gamna"]}
    result = accuracy(truths, texts)
    assert result["cer"] == pytest.approx(1 / 14, abs=1e-5)  # one substitution in 9 + 5 characters
    assert result["word_f1"] == pytest.approx(2 / 3, abs=1e-5)  # 2 of 3 words each way


def _run(engine: str, models: str, pages_s: float, server_pages_s: float | None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "engine": engine,
        "models": models,
        "label": MODEL_SETS[models].label,
        "cer": 0.01,
        "word_f1": 0.98,
        "engine_limit": {"pages_per_s": pages_s, "median_page_s": 1 / pages_s},
    }
    if server_pages_s is not None:
        run["server"] = {"throughput_pages_s": server_pages_s}
    return run


def test_table_gives_each_set_against_v5_on_the_same_engine() -> None:
    report = {
        "pages": ["p1.png", "p2.png"],
        "dpi": 150.0,
        "cpu_threads": 2,
        "cpu_count": 2,
        "load_average_at_start": (3.0, 2.0, 1.0),
        "load_average_at_end": (4.0, 2.0, 1.0),
        "runs": [
            _run("openvino", "v5", 0.4, 0.5),
            _run("openvino", "v6", 0.2, 0.2),
            _run("onnxruntime", "v5", 0.3, None),
            _run("onnxruntime", "v6-736", 0.1, None),
        ],
    }
    text = markdown(report, 4)
    assert (
        "| openvino | PP-OCRv6 small | 0.0100 | 0.9800 | 0.200 | 5.00 | 0.200 | 0.50 / 0.40 |"
        in text
    )
    assert "| onnxruntime | PP-OCRv6 small, det 736 min | 0.0100 | 0.9800 | 0.100 |" in text
    assert "| 0.33 |" in text
    assert "load average 3.0 at the start, 4.0 at the end" in text
