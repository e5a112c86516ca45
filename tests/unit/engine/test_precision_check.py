"""This CPU's precision check, around its measurement (`serving.engine.precision_check`): when it
runs, its cache (one measurement per CPU model, OpenVINO version, model files and check set), its
lock (workers starting together measure once) and the verdicts it gives the predictors. The
measurement is faked here; the real models on this machine's CPU:
tests/integration/test_precision_check_models.py."""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from models.base import PredictorError
from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions
from models.openvino_backend import OpenVinoPredictor
from models.openvino_precision import shortfalls
from models.precision_verdict import ModelCheck, TextScore, Trial
from models.registry import EngineChoice
from models.spec import ModelSpec, load_model_spec
from serving.engine import precision_cache, precision_check
from serving.engine.check_set import CheckItem, check_set_dir, write_check_set
from serving.model_sets import StagePair

pytestmark = pytest.mark.unit

WITH_BF16 = ["FP32", "BF16", "INT8", "BIN", "EXPORT_IMPORT"]
NO_BF16 = ["FP32", "INT8", "BIN", "EXPORT_IMPORT"]
PAIR = StagePair("det", "rec", ("ch", "en"))
F32 = {"synthetic": TextScore(5, 5600, 0), "en": TextScore(0, 630, 0)}


def _fake_openvino(capabilities: list[str], version: str = "2026.4.1") -> Any:
    class Core:
        def get_property(self, device: str, name: str) -> Any:
            return {"OPTIMIZATION_CAPABILITIES": capabilities, "FULL_DEVICE_NAME": "AMD EPYC"}[name]

    return SimpleNamespace(Core=Core, get_version=lambda: version)


def _spec(tmp_path: Path, name: str, kind: str) -> ModelSpec:
    folder = tmp_path / "models" / name
    folder.mkdir(parents=True)
    shutil.copy(embedded_model_dir(name) / "inference.yml", folder / "inference.yml")
    (folder / "inference.onnx").write_bytes(f"{name}: read by the fakes only".encode())
    return load_model_spec(folder, kind)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelSpec]:
    """PP-OCRv5 mobile's det and rec, their ONNX files stand-ins (read once: the recogniser's
    dictionary takes a while to parse)."""
    folder = tmp_path_factory.mktemp("specs")
    return {
        "det": _spec(folder, "PP-OCRv5_mobile_det", "det"),
        "rec": _spec(folder, "PP-OCRv5_mobile_rec", "rec"),
        "rec@PP-OCRv6_small": _spec(folder, "PP-OCRv6_small_rec", "rec"),
    }


def _predictors(
    specs: dict[str, ModelSpec], options: EngineOptions
) -> dict[str, OpenVinoPredictor]:
    return {stage: OpenVinoPredictor(specs[stage], options) for stage in ("det", "rec")}


class Measured:
    """A fake measurement: the detector passes bf16, the recogniser merges a word; counts the
    measurements and can take its time."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.seconds = seconds

    def __call__(
        self,
        det: ModelSpec,
        rec: ModelSpec,
        langs: tuple[str, ...],
        candidates: Any,
        options: EngineOptions,
        check_set: Any,
    ) -> tuple[ModelCheck, ModelCheck]:
        self.calls.append(langs)
        time.sleep(self.seconds)
        merged = {**F32, "synthetic": TextScore(5, 5600, 1)}
        return (
            _model_check(det.model_name, F32),
            _model_check(rec.model_name, merged),
        )


def _model_check(model: str, scores: dict[str, TextScore]) -> ModelCheck:
    trial = Trial(precision="bf16", scores=scores, shortfalls=shortfalls(scores, F32, "bf16"))
    return ModelCheck(
        model=model,
        f32=F32,
        trials=(trial,),
        languages=("synthetic", "en"),
        measured_at="2026-12-07T01:14:23+00:00",
        measured_s=38.2,
    )


@pytest.fixture
def setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, specs: dict[str, ModelSpec]
) -> tuple[EngineOptions, Measured]:
    """Options for a bf16 CPU, a check set in the conversion cache, the measurement faked."""
    onnx_dir = tmp_path / "onnx"
    page = np.full((32, 64, 3), 255, np.uint8)
    write_check_set(check_set_dir(onnx_dir), [CheckItem("s", "synthetic", page, "a b")], {})
    fake = _fake_openvino(WITH_BF16)
    monkeypatch.setattr(precision_check, "import_engine", lambda *_: fake)
    measured = Measured()
    monkeypatch.setattr(precision_check, "measure_pair", measured)
    options = EngineOptions(
        onnx_dir=str(onnx_dir), precision_check_dir=str(tmp_path / "cache"), cpu_threads=1
    )
    return options, measured


def test_the_first_start_measures_and_caches_and_the_next_reads_the_cache(
    tmp_path: Path, setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    options, measured = setup
    predictors = _predictors(specs, options)
    checks = precision_check.check_precisions(predictors, [PAIR])
    assert measured.calls == [("ch", "en")]
    assert checks["det"].passed("bf16")
    assert not checks["rec"].passed("bf16")
    assert checks["det"].cache == "fresh"
    # Each predictor loads with its own model's verdict.
    assert predictors["det"].options.openvino_verdict is checks["det"]
    assert predictors["rec"].options.openvino_verdict is checks["rec"]
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    again = precision_check.check_precisions(_predictors(specs, options), [PAIR])
    assert len(measured.calls) == 1
    assert again["rec"].cache == "hit"
    assert again["rec"].to_dict() == checks["rec"].to_dict()


def test_another_openvino_or_model_file_measures_again(
    tmp_path: Path,
    setup: tuple[EngineOptions, Measured],
    monkeypatch: pytest.MonkeyPatch,
    specs: dict[str, ModelSpec],
) -> None:
    options, measured = setup
    precision_check.check_precisions(_predictors(specs, options), [PAIR])
    newer = _fake_openvino(WITH_BF16, version="2027.0.0")
    monkeypatch.setattr(precision_check, "import_engine", lambda *_: newer)
    precision_check.check_precisions(_predictors(specs, options), [PAIR])
    assert len(measured.calls) == 2
    tuned = _spec(tmp_path, "PP-OCRv5_mobile_rec", "rec")
    assert tuned.onnx_file is not None
    tuned.onnx_file.write_bytes(b"a fine-tuned recogniser")
    predictors = {**_predictors(specs, options), "rec": OpenVinoPredictor(tuned, options)}
    precision_check.check_precisions(predictors, [PAIR])
    assert len(measured.calls) == 3


def test_a_set_serving_other_languages_measures_again(
    setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    """The check reads the check set's items in the set's languages: a verdict measured for
    Chinese and English says nothing of the French lines a set serving French reads; a language
    the check set has no items for changes nothing."""
    options, measured = setup
    page = np.full((32, 64, 3), 255, np.uint8)
    items = [CheckItem("s", "synthetic", page, "a b"), CheckItem("f", "fr", page, "é")]
    write_check_set(check_set_dir(Path(options.onnx_dir)), items, {})
    precision_check.check_precisions(_predictors(specs, options), [PAIR])
    wider = StagePair(PAIR.det, PAIR.rec, ("ch", "en", "fr"))
    checks = precision_check.check_precisions(_predictors(specs, options), [wider])
    assert measured.calls == [("ch", "en"), ("ch", "en", "fr")]
    assert checks["rec"].cache == "fresh"
    nothing_new = StagePair(PAIR.det, PAIR.rec, ("ch", "en", "fr", "sw"))  # no Swahili items
    assert precision_check.check_precisions(_predictors(specs, options), [nothing_new])
    assert len(measured.calls) == 2


@pytest.mark.parametrize(
    ("setting", "checked", "capabilities"),
    [
        ("f32", True, WITH_BF16),  # f32 forced: no check runs, the reason says so
        ("bf16", True, WITH_BF16),  # forced: as asked
        ("auto", False, WITH_BF16),  # engine.openvino_precision_check = false
        ("auto", True, NO_BF16),  # nothing to check where the CPU has no bf16
    ],
)
def test_no_check_runs_where_the_setting_needs_none(
    tmp_path: Path,
    setup: tuple[EngineOptions, Measured],
    monkeypatch: pytest.MonkeyPatch,
    specs: dict[str, ModelSpec],
    setting: Any,
    checked: bool,
    capabilities: list[str],
) -> None:
    options, measured = setup
    fake = _fake_openvino(capabilities)
    monkeypatch.setattr(precision_check, "import_engine", lambda *_: fake)
    options = dataclasses.replace(options, openvino_precision=setting, openvino_check=checked)
    predictors = _predictors(specs, options)
    assert precision_check.check_precisions(predictors, [PAIR]) == {}
    assert measured.calls == []
    assert predictors["rec"].options.openvino_verdict is None
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("capabilities", "bf16"), [(NO_BF16, "probe"), (WITH_BF16, "absent"), (WITH_BF16, "probe")]
)
def test_auto_tries_the_int8_form_where_one_was_made(
    tmp_path: Path,
    setup: tuple[EngineOptions, Measured],
    monkeypatch: pytest.MonkeyPatch,
    specs: dict[str, ModelSpec],
    capabilities: list[str],
    bf16: Any,
) -> None:
    """Issue 46 item 5: "auto" tries a model's int8 form where it exists (here the
    recogniser's only), after bf16 where the CPU has it; `engine.openvino_bf16 = "absent"`
    takes a bf16 CPU as one without (the seam the real-model test forces)."""
    options, _ = setup
    fake = _fake_openvino(capabilities)
    monkeypatch.setattr(precision_check, "import_engine", lambda *_: fake)
    made = {specs["rec"].onnx_file}
    for name in ("int8.xml", "int8.bin"):
        (tmp_path / name).write_bytes(b"an int8 model, read by the fakes only")
    monkeypatch.setattr(
        precision_check,
        "find_int8",
        lambda spec, _dir: tmp_path / "int8.xml" if spec.onnx_file in made else None,
    )
    tried: list[Any] = []

    def measure(det: ModelSpec, rec: ModelSpec, *args: Any) -> tuple[ModelCheck, ModelCheck]:
        tried.append(args[1])
        return _model_check(det.model_name, F32), _model_check(rec.model_name, F32)

    monkeypatch.setattr(precision_check, "measure_pair", measure)
    options = dataclasses.replace(options, openvino_precision="auto", openvino_bf16=bf16)
    precision_check.check_precisions(_predictors(specs, options), [PAIR])
    with_bf16 = bf16 == "probe" and "BF16" in capabilities
    assert tried == [(("bf16",), ("bf16", "int8")) if with_bf16 else ((), ("int8",))]


def test_without_a_check_set_both_models_get_a_note_and_nothing_is_cached(
    tmp_path: Path,
    setup: tuple[EngineOptions, Measured],
    monkeypatch: pytest.MonkeyPatch,
    specs: dict[str, ModelSpec],
) -> None:
    """A clone converted before the check existed, without the fonts and PDFs to build one: f32,
    saying what to run. Once the set is there, the check runs."""
    options, measured = setup
    shutil.rmtree(check_set_dir(options.onnx_dir))
    monkeypatch.setattr(precision_check, "ensure_check_set", _no_fonts)
    checks = precision_check.check_precisions(_predictors(specs, options), [PAIR])
    assert measured.calls == []
    assert checks["det"].note.startswith("no check set in ")
    assert "make convert builds it" in checks["rec"].note
    assert list((tmp_path / "cache").glob("*.json")) == []


def _no_fonts(directory: Path) -> Any:
    raise OSError("font 'DejaVu Sans' not found")


def test_a_check_set_without_the_sets_languages_checks_nothing(
    tmp_path: Path, setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    options, measured = setup
    korean = StagePair("det", "rec", ("korean",))
    checks = precision_check.check_precisions(_predictors(specs, options), [korean])
    assert measured.calls == []
    assert checks["rec"].note == "the check set has no pages in the set's languages (korean)"


def test_a_cache_that_cannot_be_written_is_a_note_not_a_failed_start(
    tmp_path: Path, setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    options, measured = setup
    (tmp_path / "a-file").write_text("")
    options = dataclasses.replace(options, precision_check_dir=str(tmp_path / "a-file"))
    checks = precision_check.check_precisions(_predictors(specs, options), [PAIR])
    assert measured.calls == []
    assert checks["det"].note.startswith(f"cannot use the check's cache {tmp_path / 'a-file'}")


def test_workers_starting_together_measure_once(
    tmp_path: Path, setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    """The cache's lock: the first worker measures, the others wait for it and read its file.
    (Threads here: `flock` locks each open of the lock file, in one process as across them.)"""
    options, measured = setup
    measured.seconds = 0.3
    found: list[dict[str, ModelCheck]] = []
    workers = [
        threading.Thread(
            target=lambda i=i: found.append(
                precision_check.check_precisions(_predictors(specs, options), [PAIR])
            )
        )
        for i in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(measured.calls) == 1
    assert sorted(checks["det"].cache for checks in found) == ["fresh", "hit", "hit"]


def test_the_lock_makes_a_second_holder_wait(tmp_path: Path) -> None:
    order: list[str] = []
    taken = threading.Event()

    def first() -> None:
        with precision_cache.locked(tmp_path):
            taken.set()
            time.sleep(0.2)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    taken.wait()
    with precision_cache.locked(tmp_path):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]


def test_an_unreadable_cache_file_is_measured_again(tmp_path: Path) -> None:
    key = precision_cache.cache_key({"cpu": "AMD EPYC"})
    assert key != precision_cache.cache_key({"cpu": "Intel Xeon"})
    (tmp_path / f"{key}.json").write_text("{not json")
    assert precision_cache.read(tmp_path, key) is None
    precision_cache.write(tmp_path, key, {"det": 1})
    assert precision_cache.read(tmp_path, key) == {"det": 1}


def test_a_detector_two_sets_share_runs_at_what_both_pairs_passed(
    setup: tuple[EngineOptions, Measured],
    monkeypatch: pytest.MonkeyPatch,
    specs: dict[str, ModelSpec],
) -> None:
    options, _ = setup
    merged = {**F32, "synthetic": TextScore(5, 5600, 1)}
    results = iter(
        [
            (_model_check("det", F32), _model_check("rec", F32)),  # passed with the default's
            (_model_check("det", merged), _model_check("rec2", F32)),  # failed with the other
        ]
    )
    monkeypatch.setattr(precision_check, "measure_pair", lambda *_: next(results))
    predictors: dict[str, Any] = _predictors(specs, options)
    predictors["rec@PP-OCRv6_small"] = OpenVinoPredictor(specs["rec@PP-OCRv6_small"], options)
    pairs = [PAIR, StagePair("det", "rec@PP-OCRv6_small", ("fr",))]
    checks = precision_check.check_precisions(predictors, pairs)
    assert not checks["det"].passed("bf16")
    assert checks["rec"].passed("bf16")
    assert checks["rec@PP-OCRv6_small"].passed("bf16")


def test_a_worker_serving_only_the_recogniser_makes_the_detector_for_the_check(
    tmp_path: Path, setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    options, measured = setup
    predictors = _predictors(specs, options)
    engine = EngineChoice(backend="openvino", options=options)
    made = {"rec": predictors["rec"]}
    checks = precision_check.check_worker_precisions(made, specs, (), engine)
    assert measured.calls == [("ch", "chinese_cht", "en", "japan")]  # its recogniser's languages
    assert set(checks) == {"det", "rec"}
    assert predictors["rec"].options.openvino_verdict is checks["rec"]


def test_a_cached_verdict_that_cannot_be_read_is_measured_again(
    tmp_path: Path, setup: tuple[EngineOptions, Measured], specs: dict[str, ModelSpec]
) -> None:
    options, measured = setup
    precision_check.check_precisions(_predictors(specs, options), [PAIR])
    (cached,) = (tmp_path / "cache").glob("*.json")
    cached.write_text('{"det": {"model": "x"}}')  # JSON, but not a verdict
    checks = precision_check.check_precisions(_predictors(specs, options), [PAIR])
    assert len(measured.calls) == 2
    assert checks["det"].cache == "fresh"


def test_a_check_that_fails_is_a_note_and_f32_not_a_failed_start(
    tmp_path: Path,
    setup: tuple[EngineOptions, Measured],
    specs: dict[str, ModelSpec],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options, _ = setup

    def fails(*_: object) -> None:
        raise PredictorError("bf16 compile failed")

    monkeypatch.setattr(precision_check, "measure_pair", fails)
    checks = precision_check.check_precisions(_predictors(specs, options), [PAIR])
    assert checks["rec"].note == "the check failed: bf16 compile failed"
    assert list((tmp_path / "cache").glob("*.json")) == []
