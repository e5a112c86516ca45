"""int8 models by NNCF (issues 28, 46): the real quantisation of the default set (PP-OCRv6
small), its cache and provenance, the int8 models served by OpenVINO reading real pages, and
"auto" on a CPU without bf16 serving them where this CPU's check passes them.

The models are quantised here into a temporary cache, calibrated on one held-out page of the
Chinese Debian doc PDF (`make convert` calibrates on more where the CPU has no bf16:
`serving.convert.calibration`), so `make test` needs no int8 conversion of its own. A CPU
without bf16 is stood in for by `engine.openvino_bf16 = "absent"`, on any CPU. The choice of
precision, for any CPU: tests/unit/models/test_openvino_precision.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadtest.accuracy import pages_cer
from models import convert, quantize
from models.base import PredictorError
from models.embedded import resolve_model_dir
from models.openvino_backend import OpenVinoPredictor
from models.packaged import file_sha256
from models.spec import ModelSpec, load_model_spec
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.convert import calibration
from serving.convert import pdf_pages as pages
from serving.convert import run as convert_command
from serving.engine.local import LocalEngine

ov: Any = pytest.importorskip("openvino")
nncf: Any = pytest.importorskip("nncf")

DEFAULT_SET = ModelsConfig(ori="", sets={}, langs=("en",))
"""The default set's det and rec alone (PP-OCRv6 small, ONNX already); its check reads the
synthetic and English pages of the check set only: what is asserted is that "auto" runs what
the check passed, whatever it found (English and Chinese until 2026-12-07, cut for the suite's
time; the real pages read after it are still an English and a Chinese one)."""

INT8_MAX_CER_LOSS_HERE = 0.05
"""How much worse than f32 the int8 models, calibrated on two pages only, may read the test pages
(the bench measures the real calibration's loss: docs/models.md, int8)."""


def _config(onnx_dir: Path, precision: Any, *, checked: bool = False, **engine: Any) -> AppConfig:
    """`precision` as asked, or (`checked`) where this CPU's precision check passes it."""
    return AppConfig(
        models=DEFAULT_SET,
        engine=EngineConfig(
            cpu_backend="openvino",
            cpu_threads=2,
            onnx_dir=str(onnx_dir),
            openvino_precision=precision,
            openvino_precision_check=checked,
            **engine,
        ),
    )


@pytest.fixture(scope="module")
def cache(onnx_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding the f32 conversions (linked) and nothing int8."""
    folder = tmp_path_factory.mktemp("onnx")
    for entry in Path(onnx_dir).iterdir():
        if entry.is_dir() and entry.name != quantize.INT8_DIR:
            (folder / entry.name).symlink_to(entry.resolve())
    return folder


@pytest.fixture(scope="module")
def specs(cache: Path) -> dict[str, ModelSpec]:
    refs = convert_command.configured_models(AppConfig(models=DEFAULT_SET))
    assert set(refs) == {"det", "rec"}
    return {
        kind: convert.onnx_spec(load_model_spec(resolve_model_dir(ref), kind), cache)
        for kind, ref in refs.items()
    }


@pytest.fixture(scope="module")
def quantised(cache: Path, specs: dict[str, ModelSpec]) -> dict[str, tuple[Path, bool]]:
    """The default set's det and rec quantised into `cache`, each once."""
    held_out = [
        calibration.CalibrationPage(pdf, index, image)
        for pdf in pages.find_real_pdfs()[3:]
        for index in calibration.held_out_pages(pdf, 1)
        for image in pages.render_pdf_pages(pdf, dpi=150, first=index, count=1)
    ]
    assert len(held_out) == 1, "run scripts/system-deps.sh to install the Debian doc PDFs"
    inputs = calibration.calibration_inputs(_config(cache, "f32"), held_out)
    described = calibration.describe(held_out)
    return {
        kind: quantize.quantize(spec, inputs[kind], cache, described)
        for kind, spec in specs.items()
    }


@pytest.fixture(scope="module")
def real_pages() -> dict[str, tuple[np.ndarray, str]]:
    """The first text page of an English and of the Chinese PDF (no calibration page)."""
    pdfs = pages.find_real_pdfs()
    return {
        page.label: (page.image, page.text)
        for pdf in (pdfs[0], pdfs[3])
        for page in pages.text_pages(pdf, 1)
    }


def _read(engine: LocalEngine, pages: dict[str, tuple[np.ndarray, str]]) -> float:
    """The engine's CER on `pages` together."""
    texts = {
        name: [line.text for line in engine.ocr(image).lines] for name, (image, _) in pages.items()
    }
    return pages_cer({name: truth for name, (_, truth) in pages.items()}, texts)


@pytest.fixture(scope="module")
def f32_cer(cache: Path, real_pages: dict[str, tuple[np.ndarray, str]]) -> float:
    """The default set's CER at f32 on `real_pages`."""
    engine = LocalEngine(_config(cache, "f32"))
    engine.load()
    return _read(engine, real_pages)


def test_missing_int8_models_name_the_command(cache: Path) -> None:
    empty = cache.parent / "no-int8"
    empty.mkdir(exist_ok=True)
    for entry in cache.iterdir():
        if entry.name != quantize.INT8_DIR and not (empty / entry.name).exists():
            (empty / entry.name).symlink_to(entry.resolve())
    for checked in (False, True):  # no check runs on models that are not there
        engine = LocalEngine(_config(empty, "int8", checked=checked))
        with pytest.raises(PredictorError, match=r"has no int8 form.*make convert-int8"):
            engine.load()


def test_quantisation_is_cached_with_its_provenance(
    cache: Path, specs: dict[str, ModelSpec], quantised: dict[str, tuple[Path, bool]]
) -> None:
    for kind, spec in specs.items():
        path, made_now = quantised[kind]
        assert made_now
        assert path == quantize.find_int8(spec, cache)
        assert path.is_file()
        assert path.with_suffix(".bin").is_file()
        provenance = json.loads((path.parent / convert.PROVENANCE_FILE).read_text())
        assert spec.onnx_file is not None
        assert provenance["source_onnx_sha256"] == file_sha256(spec.onnx_file)
        assert provenance["model_name"] == spec.model_name
        assert provenance["nncf"] == nncf.__version__
        assert provenance["openvino"] == ov.get_version()
        assert provenance["recipe"] == quantize.recipe_for(spec).to_dict()
        assert provenance["calibration"]["page_count"] == 1
        assert provenance["calibration"]["inputs"] >= 1  # the page, or its line batches
        labels = provenance["calibration"]["pages"]
        assert all(label.startswith("maint-guide") for label in labels), labels
        # A second run quantises nothing.
        assert quantize.quantize(spec, [], cache, {}) == (path, False)


def test_the_convert_command_skips_quantised_models_without_rendering(
    cache: Path,
    quantised: dict[str, tuple[Path, bool]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def no_pages(*_: object) -> list[calibration.CalibrationPage]:
        raise AssertionError("a second run rendered calibration pages")

    monkeypatch.setattr(calibration, "calibration_pages", no_pages)
    before = sorted(p.name for p in (cache / quantize.INT8_DIR).iterdir())
    with caplog.at_level(logging.INFO, logger="serving.convert"):
        assert convert_command.quantize_models(AppConfig(models=DEFAULT_SET), cache) == 0
    assert sorted(p.name for p in (cache / quantize.INT8_DIR).iterdir()) == before
    assert caplog.text.count("(int8 cached)") == 2


def test_int8_loads_the_int8_models_and_reads_real_pages(
    cache: Path,
    quantised: dict[str, tuple[Path, bool]],
    real_pages: dict[str, tuple[np.ndarray, str]],
    f32_cer: float,
) -> None:
    engine = LocalEngine(_config(cache, "int8"))
    engine.load()
    for stage, predictor in engine.predictors.items():
        assert isinstance(predictor, OpenVinoPredictor)
        assert predictor.precision is not None
        assert predictor.precision.precision == "int8"
        assert predictor.model_file == quantised[stage][0]
    int8_cer = _read(engine, real_pages)
    print(f"CER f32 {f32_cer:.4f}, int8 {int8_cer:.4f}")
    assert f32_cer < 0.1
    assert int8_cer <= f32_cer + INT8_MAX_CER_LOSS_HERE


def test_auto_without_bf16_runs_int8_where_this_cpus_check_passed_it(
    cache: Path,
    quantised: dict[str, tuple[Path, bool]],
    real_pages: dict[str, tuple[np.ndarray, str]],
    f32_cer: float,
    tmp_path: Path,
) -> None:
    """Issue 46 item 5: on a CPU without bf16 (stood in for here), "auto" tries each model's int8
    form and runs it where this CPU's precision check read the check set with it within 0.2 CER
    points of f32 and no more merged words, else f32, and says why; what runs reads the real
    pages within the bound of f32. ("int8" asked for runs the same check, bf16 its fallback.)"""
    config = _config(
        cache, "auto", checked=True, precision_check_dir=str(tmp_path), openvino_bf16="absent"
    )
    engine = LocalEngine(config)
    engine.load()
    for stage in ("det", "rec"):
        predictor = engine.predictors[stage]
        assert isinstance(predictor, OpenVinoPredictor)
        check = predictor.options.openvino_verdict
        assert check is not None
        assert [t.precision for t in check.trials] == ["int8"]  # no bf16 to try
        passed = check.passed("int8")
        assert predictor.precision is not None
        assert predictor.precision.precision == ("int8" if passed else "f32")
        assert predictor.precision.reason.startswith("auto: ")
        assert "this CPU's check" in predictor.precision.reason
        if passed:
            assert predictor.model_file == quantised[stage][0]
        print(stage, predictor.precision.precision, predictor.precision.reason)
    assert _read(engine, real_pages) <= f32_cer + INT8_MAX_CER_LOSS_HERE
