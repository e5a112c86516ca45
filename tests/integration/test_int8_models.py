"""int8 models by NNCF (issue 28): the real quantisation of the converted default models, its
cache and provenance, and the int8 models served by OpenVINO reading real pages.

The models are quantised here into a temporary cache, calibrated on one held-out page of each
Debian doc PDF (`make convert-int8` calibrates on more: `serving.convert.calibration`), so
`make test` needs no int8 conversion of its own. The choice of precision, for any CPU:
tests/unit/models/test_openvino_precision.py.
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
from serving.config import AppConfig, EngineConfig
from serving.convert import calibration
from serving.convert import pdf_pages as pages
from serving.convert import run as convert_command
from serving.engine.local import LocalEngine
from tests.conftest import ONE_SET

ov: Any = pytest.importorskip("openvino")
nncf: Any = pytest.importorskip("nncf")

INT8_MAX_CER_LOSS_HERE = 0.05
"""How much worse than f32 the int8 models, calibrated on two pages only, may read the test pages
(the bench measures the real calibration's loss: docs/models.md, int8)."""


def _config(onnx_dir: Path, precision: Any, *, checked: bool = False, **engine: Any) -> AppConfig:
    """`precision` as asked, or (`checked`) where this CPU's precision check passes it."""
    return AppConfig(
        models=ONE_SET,
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
    """A cache holding PP-OCRv5 mobile's f32 conversions (linked) and nothing int8."""
    folder = tmp_path_factory.mktemp("onnx")
    for entry in Path(onnx_dir).iterdir():
        if entry.is_dir() and entry.name != quantize.INT8_DIR:
            (folder / entry.name).symlink_to(entry.resolve())
    return folder


@pytest.fixture(scope="module")
def specs(cache: Path) -> dict[str, ModelSpec]:
    refs = convert_command.configured_models(AppConfig(models=ONE_SET))
    assert set(refs) == {"det", "rec"}
    return {
        kind: convert.onnx_spec(load_model_spec(resolve_model_dir(ref), kind), cache)
        for kind, ref in refs.items()
    }


@pytest.fixture(scope="module")
def quantised(cache: Path, specs: dict[str, ModelSpec]) -> dict[str, tuple[Path, bool]]:
    """PP-OCRv5 mobile's det and rec (`ONE_SET`, named) quantised into `cache`, each once."""
    held_out = [
        calibration.CalibrationPage(pdf, index, image)
        for pdf in pages.find_real_pdfs()[2:]
        for index in calibration.held_out_pages(pdf, 1)
        for image in pages.render_pdf_pages(pdf, dpi=150, first=index, count=1)
    ]
    assert len(held_out) == 2, "run scripts/system-deps.sh to install the Debian doc PDFs"
    inputs = calibration.calibration_inputs(_config(cache, "f32"), held_out)
    described = calibration.describe(held_out)
    return {
        kind: quantize.quantize(spec, inputs[kind], cache, described)
        for kind, spec in specs.items()
    }


@pytest.fixture(scope="module")
def real_pages() -> dict[str, tuple[np.ndarray, str]]:
    """The first text page of an English and of the Chinese PDF (no calibration page)."""
    chosen = {}
    for pdf in (pages.find_real_pdfs()[0], pages.find_real_pdfs()[3]):
        (index,) = pages.select_text_pages(pdf, 1)
        (image,) = pages.render_pdf_pages(pdf, dpi=150, first=index, count=1)
        chosen[f"{pdf.name}:p{index + 1}"] = (image, pages.pdf_page_text(pdf, index))
    return chosen


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
        assert provenance["calibration"]["page_count"] == 2
        assert provenance["calibration"]["inputs"] >= 2
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
        assert convert_command.quantize_models(AppConfig(models=ONE_SET), cache) == 0
    assert sorted(p.name for p in (cache / quantize.INT8_DIR).iterdir()) == before
    assert caplog.text.count("(int8 cached)") == 2


def test_int8_loads_the_int8_models_and_reads_real_pages(
    cache: Path,
    quantised: dict[str, tuple[Path, bool]],
    real_pages: dict[str, tuple[np.ndarray, str]],
) -> None:
    truths = {name: truth for name, (_, truth) in real_pages.items()}
    cer = {}
    for precision in ("f32", "int8"):
        engine = LocalEngine(_config(cache, precision))
        engine.load()
        for stage, predictor in engine.predictors.items():
            assert isinstance(predictor, OpenVinoPredictor)
            assert predictor.precision is not None
            assert predictor.precision.precision == precision
            if precision == "int8":
                assert predictor.model_file == quantised[stage][0]
        texts = {
            name: [line.text for line in engine.ocr(image).lines]
            for name, (image, _) in real_pages.items()
        }
        cer[precision] = pages_cer(truths, texts)
    print(f"CER f32 {cer['f32']:.4f}, int8 {cer['int8']:.4f}")
    assert cer["f32"] < 0.1
    assert cer["int8"] <= cer["f32"] + INT8_MAX_CER_LOSS_HERE


def test_int8_asked_for_runs_what_this_cpus_check_passed(
    cache: Path, quantised: dict[str, tuple[Path, bool]], tmp_path: Path
) -> None:
    """Checked (the default), each model runs int8 where this CPU's precision check read the
    check set with it within 0.2 CER points of f32 and no more merged words, else bf16 where that
    passed, else f32, and says why (issue 46)."""
    engine = LocalEngine(_config(cache, "int8", checked=True, precision_check_dir=str(tmp_path)))
    engine.load()
    for stage in ("det", "rec"):
        predictor = engine.predictors[stage]
        assert isinstance(predictor, OpenVinoPredictor)
        check = predictor.options.openvino_verdict
        assert check is not None
        assert check.trials[0].precision == "int8"
        passed = [t.precision for t in check.trials if t.passed]
        assert predictor.precision is not None
        assert predictor.precision.precision == (passed[0] if passed else "f32")
        assert predictor.precision.reason.startswith("int8 asked for: ")
        assert "this CPU's check" in predictor.precision.reason
        if predictor.precision.precision == "int8":
            assert predictor.model_file == quantised[stage][0]
