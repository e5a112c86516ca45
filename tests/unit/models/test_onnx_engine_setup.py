"""The ONNX engines' seams: ONNX model directories, the conversion cache, options and errors.

The real converter and engines on the real models are in tests/integration/test_onnx_engines.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from models import convert, onnx_predictor
from models.base import EngineBackendError, PredictorError, PredictorNotLoadedError
from models.bundle import ModelBundle, load_bundle
from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions, EngineOptionsError
from models.onnxruntime_backend import OnnxRuntimePredictor, session_options
from models.openvino_backend import OPENVINO, OpenVinoPredictor, compile_config
from models.packaged import file_sha256
from models.registry import BACKENDS, backend_names
from models.spec import ModelSpec, load_model_spec
from serving.config import AppConfig, EngineConfig, WorkersConfig, load_config
from serving.convert import run as convert_command
from serving.engine.check_set import check_set_dir
from serving.engine.choice import engine_options
from serving.errors import ConfigError
from serving.service.runtime import Runtime
from tests.conftest import ONE_SET

pytestmark = pytest.mark.unit

# A converter stand-in: writes its argv as the "ONNX file" (the real one runs in integration).
FAKE_CONVERTER = """#!{python}
import sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
open(args["--save_file"], "w").write(" ".join(sys.argv[1:]))
"""
FAILING_CONVERTER = """#!/bin/sh
echo "cannot convert: unsupported op" >&2
exit 3
"""


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bin" / "paddle2onnx"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    return load_bundle("embedded:PP-OCRv5_mobile_det", "embedded:PP-OCRv5_mobile_rec")


def _copy_model(tmp_path: Path, name: str, *, onnx: bool, paddle: bool) -> Path:
    source = embedded_model_dir(name)
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(source / "inference.yml", folder / "inference.yml")
    if paddle:
        shutil.copy(source / "inference.json", folder / "inference.json")
        shutil.copy(source / "inference.pdiparams", folder / "inference.pdiparams")
    if onnx:
        (folder / "inference.onnx").write_bytes(b"not read here")
    return folder


def test_a_directory_with_inference_onnx_is_an_onnx_model(tmp_path: Path) -> None:
    only = load_model_spec(
        _copy_model(tmp_path, "PP-OCRv5_mobile_det", onnx=True, paddle=False), "det"
    )
    assert (only.format, only.formats) == ("onnx", frozenset({"onnx"}))
    assert only.program_file is None
    assert only.params_file is None
    assert only.onnx_file == only.directory / "inference.onnx"
    assert only.det_params is not None  # the yml's settings are read as for a Paddle model

    both = load_model_spec(
        _copy_model(tmp_path, "PP-OCRv5_mobile_rec", onnx=True, paddle=True), "rec"
    )
    assert (both.format, both.formats) == ("paddle", frozenset({"paddle", "onnx"}))


def test_an_onnx_model_is_served_as_is_and_paddle_refuses_it(tmp_path: Path) -> None:
    spec = load_model_spec(
        _copy_model(tmp_path, "PP-OCRv5_mobile_det", onnx=True, paddle=False), "det"
    )
    empty_cache = EngineOptions(onnx_dir=str(tmp_path / "cache"))
    assert OPENVINO.resolve(spec, empty_cache) is spec
    assert convert.onnx_spec(spec, tmp_path / "cache") is spec
    # Paddle reads it through its X2Paddle conversion only (`models.paddle_convert`).
    with pytest.raises(EngineBackendError, match=r"no Paddle conversion .* make convert-paddle"):
        BACKENDS["paddle"].predictor(spec, EngineOptions(paddle_dir=str(tmp_path / "none")))


def test_the_onnx_engines_run_on_cpus_only() -> None:
    assert {"openvino", "onnxruntime"} <= set(backend_names("cpu"))
    assert not {"openvino", "onnxruntime"} & set(backend_names("gpu"))
    for name in ("openvino", "onnxruntime"):
        assert BACKENDS[name].formats == frozenset({"onnx"})


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_a_paddle_model_without_its_conversion_names_the_command(
    tmp_path: Path, bundle: ModelBundle, backend: str
) -> None:
    options = EngineOptions(onnx_dir=str(tmp_path / "empty"))
    with pytest.raises(convert.ModelConversionError, match=r"make convert") as err:
        BACKENDS[backend].predictor(bundle.det, options)
    assert "PP-OCRv5_mobile_det" in str(err.value)
    assert isinstance(err.value, EngineBackendError)  # a config error at start, not a crash


def test_the_server_refuses_to_start_without_the_conversion(tmp_path: Path) -> None:
    config = AppConfig(
        models=ONE_SET,  # PP-OCRv5 mobile's Paddle models as the default set
        engine=EngineConfig(cpu_backend="openvino", onnx_dir=str(tmp_path / "empty")),
        workers=WorkersConfig(devices=("cpu",), cpu_workers=1),
    )
    with pytest.raises(convert.ModelConversionError, match="make convert"):
        Runtime.build(config, jobs=False)


def test_conversion_is_cached_by_content_with_provenance(tmp_path: Path) -> None:
    folder = _copy_model(tmp_path, "PP-OCRv5_mobile_det", onnx=False, paddle=True)
    spec = load_model_spec(folder, "det")
    cache = tmp_path / "cache"
    converter = _script(tmp_path, FAKE_CONVERTER)
    assert convert.find_onnx(spec, cache) is None

    onnx, ran = convert.convert(spec, cache, converter)
    assert ran
    assert onnx.format == "onnx"
    assert onnx.onnx_file is not None
    assert onnx.directory.parent == cache
    assert onnx.det_params == spec.det_params
    provenance = convert.read_provenance(onnx)
    assert provenance is not None
    assert provenance["model_name"] == "PP-OCRv5_mobile_det"
    assert provenance["source_sha256"] == {
        name: file_sha256(folder / name)
        for name in ("inference.json", "inference.pdiparams", "inference.yml")
    }
    assert provenance["opset_requested"] == convert.OPSET
    assert provenance["onnx_sha256"] == file_sha256(onnx.onnx_file)
    assert "--opset_version 14" in onnx.onnx_file.read_text()
    assert [p.name for p in cache.iterdir()] == [onnx.directory.name]  # no work dirs left

    again, ran = convert.convert(spec, cache, tmp_path / "no-such-converter")
    assert not ran
    assert again.onnx_file == onnx.onnx_file
    assert convert.onnx_spec(spec, cache).onnx_file == onnx.onnx_file

    # Changed weights are another model: the old conversion is not used for them.
    with (folder / "inference.pdiparams").open("ab") as f:
        f.write(b"\0")
    assert convert.find_onnx(load_model_spec(folder, "det"), cache) is None
    assert convert.cache_entry(spec, cache, opset=17) != convert.cache_entry(spec, cache)


def test_a_failing_converter_leaves_no_cache_entry(tmp_path: Path, bundle: ModelBundle) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(convert.ModelConversionError, match="unsupported op"):
        convert.convert(bundle.det, cache, _script(tmp_path, FAILING_CONVERTER))
    assert list(cache.iterdir()) == []
    assert convert.find_onnx(bundle.det, cache) is None


def test_the_cli_converts_the_configured_models(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("OCR_ENGINE__ONNX_DIR", raising=False)  # tests/conftest.py sets it
    config = tmp_path / "config.toml"
    cache = tmp_path / "cache"
    config.write_text(f'[engine]\nonnx_dir = "{cache}"\n')
    converter = _script(tmp_path, FAKE_CONVERTER)
    argv = ["--config", str(config), "--converter", str(converter)]
    assert convert_command.main(argv) == 0
    assert convert_command.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    # The default set's ONNX models (read as they are), then the other set's Paddle ones.
    stages = ["det", "rec", "det@PP-OCRv5_mobile", "rec@PP-OCRv5_mobile"]
    assert [line.split()[0] for line in lines] == stages * 2
    states = ["(as is)"] * 2 + ["(converted)"] * 2 + ["(as is)"] * 2 + ["(cached)"] * 2
    assert [line.rsplit(" (", 1)[1] for line in lines] == [state[1:] for state in states]
    # The two conversions, and the precision check's pages (serving.engine.check_set).
    assert len([p for p in cache.iterdir() if p.name != "check-set"]) == 2
    assert (check_set_dir(cache) / "check-set.json").is_file()


@pytest.mark.parametrize(
    ("engine", "capabilities", "made"),
    [
        ({}, ["FP32", "INT8"], True),  # no bf16: "auto" will check the int8 models
        ({"openvino_bf16": "absent"}, ["FP32", "BF16", "INT8"], True),  # taken as without
        ({}, ["FP32", "BF16", "INT8"], False),  # bf16 first: nothing to make
        ({"openvino_precision": "f32"}, ["FP32", "INT8"], False),  # f32 asked for: unread
    ],
)
def test_convert_makes_the_default_sets_int8_models_only_where_auto_would_check_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    engine: dict[str, str],
    capabilities: list[str],
    made: bool,
) -> None:
    """Issue 46 item 5: `make convert-no-bf16` (`--int8-without-bf16`) quantises where the CPU
    has no bf16; without NNCF (or calibration pages) it says so and converts all the same."""
    fake = SimpleNamespace(
        Core=lambda: SimpleNamespace(get_property=lambda device, name: capabilities)
    )
    monkeypatch.setattr(onnx_predictor, "import_engine", lambda *_: fake)
    config = AppConfig(models=ONE_SET, engine=EngineConfig(**engine))  # type: ignore[arg-type]
    assert convert_command.int8_for_auto(config) is made
    quantised: list[bool] = []
    monkeypatch.setattr(
        convert_command,
        "quantize_models",
        lambda *a, required=True: quantised.append(required) or 1,
    )
    monkeypatch.setattr(convert_command, "load_config", lambda *a: config)
    monkeypatch.setattr(convert_command.convert, "convert_models", lambda *a: 0)
    monkeypatch.setattr(convert_command, "build_check_set", lambda *a: 0)
    argv = ["--cache-dir", str(tmp_path), "--int8-without-bf16"]
    assert convert_command.main(argv) == 0  # a failed quantisation is a warning here
    assert quantised == ([False] if made else [])


def test_openvino_compiles_at_the_precision_chosen_for_it() -> None:
    config = compile_config(EngineOptions(cpu_threads=3), "f32")
    assert config["INFERENCE_PRECISION_HINT"] == "f32"
    assert (config["INFERENCE_NUM_THREADS"], config["NUM_STREAMS"]) == (3, 1)
    assert config["ENABLE_CPU_PINNING"] is False  # device workers must not share pinned cores
    bf16 = compile_config(EngineOptions(), "bf16")
    assert bf16["INFERENCE_PRECISION_HINT"] == "bf16"
    assert EngineOptions().openvino_precision == "auto"
    with pytest.raises(EngineOptionsError, match="openvino_precision"):
        EngineOptions(openvino_precision="f16")  # type: ignore[arg-type]


def test_openvino_bounds_its_per_shape_cache_as_onednn_is_bounded() -> None:
    """Unbounded, the CPU plugin keeps state for up to 5,000 input shapes: memory grows with
    every new page size (`make soak`); `engine.mkldnn_cache_capacity` bounds both engines."""
    assert compile_config(EngineOptions(), "f32")["CPU_RUNTIME_CACHE_CAPACITY"] == 10
    three = compile_config(EngineOptions(mkldnn_cache_capacity=3), "f32")
    assert three["CPU_RUNTIME_CACHE_CAPACITY"] == 3
    assert "CPU_RUNTIME_CACHE_CAPACITY" not in compile_config(
        EngineOptions(mkldnn_cache_capacity=0), "f32"
    )


def test_engine_settings_reach_the_onnx_engines(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[engine]\ncpu_backend = "openvino"\nopenvino_precision = "bf16"\nonnx_dir = "m"\n'
    )
    config = load_config(path, {})
    options = engine_options(config.engine, "cpu", cpu_threads=5)
    # onnx_dir is relative to the file's folder (serving/config_paths.py).
    expected = ("bf16", str(tmp_path / "m"), 5)
    assert (options.openvino_precision, options.onnx_dir, options.cpu_threads) == expected
    assert engine_options(EngineConfig(), "cpu", 1).openvino_precision == "auto"
    path.write_text('[engine]\nopenvino_precision = "fp16"\n')
    with pytest.raises(ConfigError, match=r"engine\.openvino_precision"):
        load_config(path, {})
    path.write_text("")
    with pytest.raises(ConfigError, match=r"engine\.cpu_backend"):
        load_config(path, {"OCR_ENGINE__CPU_BACKEND": "openvino-gpu"})


def test_onnxruntime_session_threads_come_from_cpu_threads() -> None:
    ort = pytest.importorskip("onnxruntime")
    so = session_options(ort, EngineOptions(cpu_threads=3))
    assert (so.intra_op_num_threads, so.inter_op_num_threads) == (3, 1)


@pytest.mark.parametrize("predictor_class", [OpenVinoPredictor, OnnxRuntimePredictor])
def test_an_unloadable_model_is_a_predictor_error(
    tmp_path: Path, predictor_class: type[OpenVinoPredictor | OnnxRuntimePredictor]
) -> None:
    pytest.importorskip(predictor_class.engine)
    folder = _copy_model(tmp_path, "PP-OCRv5_mobile_det", onnx=True, paddle=False)
    predictor = predictor_class(load_model_spec(folder, "det"), EngineOptions(cpu_threads=1))
    with pytest.raises(PredictorNotLoadedError):
        predictor.run(np.zeros((1, 3, 32, 32), np.float32))
    with pytest.raises(PredictorError, match="cannot load det model"):
        predictor.load()
    assert not predictor.loaded


def test_an_onnx_predictor_needs_an_onnx_file(bundle: ModelBundle) -> None:
    with pytest.raises(PredictorError, match="holds no ONNX model"):
        OpenVinoPredictor(bundle.det, EngineOptions())


def test_model_spec_needs_a_model_file(tmp_path: Path, bundle: ModelBundle) -> None:
    with pytest.raises(ValueError, match="names no model file"):
        ModelSpec(
            kind="det",
            model_name="x",
            directory=tmp_path,
            det_params=bundle.det.det_params,
        )
    assert os.fspath(bundle.det.files[-1]).endswith("inference.yml")
    assert json.loads(json.dumps(convert.source_hashes(bundle.det)))
