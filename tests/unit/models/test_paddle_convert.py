"""The Paddle engine's conversions of ONNX models (`models.paddle_convert`): the cache, its
provenance, a converter that fails, the classifiers X2Paddle cannot convert, and the command.

X2Paddle itself on PP-OCRv6 small, and the Paddle engine reading its output:
tests/integration/test_paddle_reads_onnx.py.
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pytest

from models import paddle_convert
from models.base import EngineBackendError
from models.embedded import resolve_model_dir
from models.engine_options import EngineOptions
from models.packaged import ORIENTATION_MODEL
from models.registry import BACKENDS
from models.spec import ModelSpec, load_model_spec
from serving.convert import run as convert_command

pytestmark = pytest.mark.unit

# An X2Paddle stand-in: writes what X2Paddle 1.6 writes on Paddle 3 (the real one: integration).
FAKE_X2PADDLE = """#!{python}
import pathlib, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
saved = pathlib.Path(args["--save_dir"]) / "inference_model"
saved.mkdir(parents=True)
(saved / "model.json").write_text(" ".join(sys.argv[1:]))
(saved / "model.pdiparams").write_bytes(b"weights")
(saved.parent / "x2paddle_code.py").write_text("# generated")
"""
FAILING_X2PADDLE = """#!/bin/sh
echo "========== HardSwish ============" >&2
exit 1
"""


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bin" / "x2paddle"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


PACKAGED = {"det": "PP-OCRv6_small_det", "rec": "PP-OCRv6_small_rec", "ori": ORIENTATION_MODEL}


def _onnx_model(tmp_path: Path, kind: str = "det") -> ModelSpec:
    """A packaged ONNX model's directory with small stand-in bytes (never run here)."""
    folder = tmp_path / f"model-{kind}"
    folder.mkdir()
    (folder / "inference.onnx").write_bytes(b"onnx " + kind.encode())
    source = resolve_model_dir(f"embedded:{PACKAGED[kind]}") / "inference.yml"
    shutil.copyfile(source, folder / "inference.yml")
    return load_model_spec(folder, kind)


def test_a_conversion_is_cached_by_content_with_provenance(tmp_path: Path) -> None:
    spec, cache = _onnx_model(tmp_path), tmp_path / "cache"
    assert paddle_convert.find_paddle(spec, cache) is None
    converted, ran = paddle_convert.convert(spec, cache, _script(tmp_path, FAKE_X2PADDLE))
    assert ran
    assert converted.format == "paddle"
    assert converted.program_file is not None
    assert converted.program_file.name == "inference.json"
    assert sorted(p.name for p in converted.directory.iterdir()) == [
        "convert.out",
        "inference.json",
        "inference.pdiparams",
        "inference.yml",
        "provenance.json",
    ]  # X2Paddle's generated code and second copy of the weights are not kept
    assert "--disable_feedback True" in converted.program_file.read_text()  # nothing sent home
    provenance = json.loads((converted.directory / "provenance.json").read_text())
    assert provenance["model_name"] == "PP-OCRv6_small_det"
    assert provenance["command"][:4] == ["x2paddle", "--framework", "onnx", "--model"]
    again, ran = paddle_convert.convert(spec, cache, tmp_path / "no-such-converter")
    assert not ran
    assert again.directory == converted.directory
    options = EngineOptions(paddle_dir=str(cache))
    assert BACKENDS["paddle"].resolve(spec, options).directory == converted.directory


def test_a_paddle_model_is_read_as_it_is(tmp_path: Path, det_spec: ModelSpec) -> None:
    assert paddle_convert.find_paddle(det_spec, tmp_path) is det_spec


def test_a_failing_converter_leaves_no_cache_entry(tmp_path: Path) -> None:
    spec, cache = _onnx_model(tmp_path), tmp_path / "cache"
    with pytest.raises(paddle_convert.ModelConversionError, match="HardSwish"):
        paddle_convert.convert(spec, cache, _script(tmp_path, FAILING_X2PADDLE))
    assert list(cache.iterdir()) == []


def test_without_a_conversion_the_error_names_the_command(tmp_path: Path) -> None:
    options = EngineOptions(paddle_dir=str(tmp_path / "empty"))
    with pytest.raises(EngineBackendError, match="make convert-paddle"):
        BACKENDS["paddle"].resolve(_onnx_model(tmp_path, "rec"), options)
    # The packaged classifiers do not convert: no command would help.
    with pytest.raises(EngineBackendError, match="X2Paddle does not convert it") as refused:
        BACKENDS["paddle"].resolve(_onnx_model(tmp_path, "ori"), options)
    assert "make convert-paddle" not in str(refused.value)


def test_the_cli_converts_the_default_sets_onnx_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OCR_ENGINE__PADDLE_DIR", raising=False)  # tests/conftest.py sets it
    config = tmp_path / "config.toml"
    cache = tmp_path / "cache"
    config.write_text(f'[engine]\npaddle_dir = "{cache}"\n')
    argv = [
        "--paddle",
        "--config",
        str(config),
        "--converter",
        str(_script(tmp_path, FAKE_X2PADDLE)),
    ]
    assert convert_command.main(argv) == 0
    assert convert_command.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    # PP-OCRv6 small (ONNX) converted, then cached; PP-OCRv5 mobile's Paddle models as they are.
    stages = ["det", "rec", "det@PP-OCRv5_mobile", "rec@PP-OCRv5_mobile"]
    assert [line.split()[0] for line in lines] == stages * 2
    states = ["converted"] * 2 + ["as is"] * 2 + ["cached"] * 2 + ["as is"] * 2
    assert [line.rsplit(" (", 1)[1].rstrip(")") for line in lines] == states
    assert len(list(cache.iterdir())) == 2
