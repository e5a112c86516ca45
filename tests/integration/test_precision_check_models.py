"""This CPU's precision check with the real models (issue 46): for PP-OCRv5 mobile and PP-OCRv6
small, "auto" measures the check set at f32 and bf16 where the CPU has bf16, caches the verdict,
reads it from the cache on the next load, and the precision each model then runs at reads the
check set as the check claimed. Where the CPU has no bf16 (and with f32 forced, which stands in
for such a CPU on any machine) no check runs and the reason says so.

Holds on an AMX Xeon, a bf16 CPU without AMX and an AVX2-only one: what is asserted is what the
check itself found, never another CPU's verdict. The check's own logic, with fakes:
tests/unit/engine/test_precision_check.py and tests/unit/models/test_openvino_precision.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from models.openvino_backend import OpenVinoPredictor
from models.openvino_precision import has_bf16, shortfalls
from models.precision_verdict import ModelCheck, TextScore
from pipelines.text_scores import char_edits, merged_words
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.engine.check_set import check_set_dir, load_check_set
from serving.engine.local import LocalEngine

ov: Any = pytest.importorskip("openvino")

SETS = {
    "PP-OCRv5_mobile": dataclasses.replace(
        ModelsConfig(),
        det="embedded:PP-OCRv5_mobile_det",
        rec="embedded:PP-OCRv5_mobile_rec",
        langs=("ch", "en"),
        sets={},
    ),
    "PP-OCRv6_small": ModelsConfig(langs=("ch", "en"), sets={}),
}
"""Both sets the server reads with (the default and the named one, whichever is which), each
alone (the default config loads the other beside the default, and the check would measure both)
and as serving Chinese and English only: the check reads the synthetic, English and Chinese
pages of the check set, about half the time of every language a set serves, which the server's
own check reads."""


@pytest.fixture(scope="module")
def bf16() -> bool:
    return has_bf16(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this module's own: the first load measures."""
    return tmp_path_factory.mktemp("precision")


def _engine(models: ModelsConfig, onnx_dir: str, cache_dir: Path, **engine: Any) -> LocalEngine:
    config = EngineConfig(
        cpu_backend="openvino",
        cpu_threads=2,
        onnx_dir=onnx_dir,
        precision_check_dir=str(cache_dir),
        **engine,
    )
    loaded = LocalEngine(AppConfig(models=dataclasses.replace(models, ori=""), engine=config))
    loaded.load()
    return loaded


def _checks(engine: LocalEngine) -> dict[str, ModelCheck]:
    found = {}
    for stage in ("det", "rec"):
        predictor = engine.predictors[stage]
        assert isinstance(predictor, OpenVinoPredictor)
        if predictor.options.openvino_verdict is not None:
            found[stage] = predictor.options.openvino_verdict
    return found


@pytest.fixture(scope="module", params=sorted(SETS))
def measured(request: pytest.FixtureRequest, onnx_dir: str, cache_dir: Path) -> LocalEngine:
    """The set loaded at "auto" with an empty cache: the check runs where it has to."""
    return _engine(SETS[request.param], onnx_dir, cache_dir)


def test_auto_checks_bf16_on_this_cpu_and_caches_the_verdict(
    measured: LocalEngine, onnx_dir: str, cache_dir: Path, bf16: bool
) -> None:
    checks = _checks(measured)
    if not bf16:  # int8 checked where `make convert` made it (issue 46 item 5), else nothing
        for stage in ("det", "rec"):
            predictor = measured.predictors[stage]
            assert isinstance(predictor, OpenVinoPredictor)
            assert predictor.precision is not None
            if stage in checks:
                assert [t.precision for t in checks[stage].trials] in ([], ["int8"])
                passed = checks[stage].passed("int8")
                assert predictor.precision.precision == ("int8" if passed else "f32")
                continue
            assert predictor.precision.precision == "f32"
            assert predictor.precision.reason.startswith("auto: this CPU has no bf16")
            assert predictor.precision.reason.endswith("f32, nothing to check")
        return
    assert set(checks) == {"det", "rec"}
    for stage, check in checks.items():
        assert check.cache == "fresh"
        assert not check.note, check.note
        assert check.trials[0].precision == "bf16"
        assert check.languages[0] == "synthetic"
        assert {"en", "ch"} <= set(check.languages)
        predictor = measured.predictors[stage]
        assert isinstance(predictor, OpenVinoPredictor)
        assert predictor.precision is not None
        # What runs is what the check passed, and the reason says what it measured.
        assert predictor.precision.precision == ("bf16" if check.passed("bf16") else "f32")
        assert "this CPU's check" in predictor.precision.reason
        assert f"measured {check.measured_at}, cache fresh" in predictor.precision.reason
    # A detector that failed leaves the recogniser's trial read with the detector at f32.
    partner = "bf16" if checks["det"].passed("bf16") else "f32"
    assert checks["rec"].trials[0].partner.endswith(f"at {partner}")
    # The verdict is cached: one file a pair, naming both models, and the next load reads it.
    files = [json.loads(path.read_text()) for path in cache_dir.glob("*.json")]
    assert checks["rec"].model in [f["rec"]["model"] for f in files]
    again = _checks(_engine(measured.config.models, onnx_dir, cache_dir))
    assert {stage: check.cache for stage, check in again.items()} == {"det": "hit", "rec": "hit"}
    assert {s: c.to_dict() for s, c in again.items()} == {s: c.to_dict() for s, c in checks.items()}


def test_what_runs_reads_the_check_set_as_the_check_claimed(
    measured: LocalEngine, onnx_dir: str, bf16: bool
) -> None:
    """The served precisions read the check set within the bound of the check's f32 text and
    merge no more words; where both run f32 that is the check's own f32 text."""
    checks = _checks(measured)
    if not checks:  # no bf16 (nor int8 made) here: nothing was claimed
        assert not bf16
        return
    reduced = "bf16" if bf16 else "int8"
    check_set = load_check_set(check_set_dir(onnx_dir))
    assert check_set is not None
    langs = checks["rec"].languages
    scores: dict[str, TextScore] = {}
    for item in check_set.items:
        if item.lang not in langs:
            continue
        text = "\n".join(line.text for line in measured.ocr(item.image).lines)
        edits, chars = char_edits(item.truth, text)
        score = TextScore(edits, chars, merged_words(item.truth, text))
        scores[item.lang] = scores.get(item.lang, TextScore(0, 0, 0)) + score
    served = [c for c in checks.values() if c.passed(reduced)]
    assert shortfalls(scores, checks["rec"].f32, reduced) == (), [c.model for c in served]
    if not served:
        assert scores == dict(checks["rec"].f32)


def test_f32_forced_runs_no_check_and_says_so(onnx_dir: str, tmp_path: Path) -> None:
    """The stand-in for a CPU without bf16, on any machine."""
    engine = _engine(SETS["PP-OCRv6_small"], onnx_dir, tmp_path, openvino_precision="f32")
    assert _checks(engine) == {}
    for stage in ("det", "rec"):
        predictor = engine.predictors[stage]
        assert isinstance(predictor, OpenVinoPredictor)
        assert predictor.precision is not None
        assert predictor.precision.precision == "f32"
        assert predictor.precision.reason == (
            "f32 asked for (engine.openvino_precision): Paddle's text; no check runs"
        )
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing cached
