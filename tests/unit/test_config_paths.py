"""Where the configuration's paths point (serving/config_paths.py): the file's folder, the working
directory for the environment's, the project's for the defaults; the same for every command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from models import packaged
from models.convert import ModelConversionError, onnx_spec
from models.embedded import embedded_model_dir
from models.spec import load_model_spec
from serving.config import AppConfig, load_config, with_paths_resolved
from serving.config_paths import defaults_base
from serving.convert import run

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory outside the clone."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_a_files_relative_paths_are_relative_to_its_folder(tmp_path: Path, elsewhere: Path) -> None:
    folder = tmp_path / "srv"
    folder.mkdir()
    (folder / "config.toml").write_text(
        '[engine]\nonnx_dir = "models/onnx"\n[jobs]\ndata_dir = "../jobs"\n'
        '[auth]\nkeys_file = "keys.toml"\n[models]\ndet = "~/det"\n'
    )
    config = load_config(folder / "config.toml")
    assert config.engine.onnx_dir == str(folder / "models/onnx")
    assert config.jobs.data_dir == str(folder / "../jobs")
    assert config.auth.keys_file == str(folder / "keys.toml")
    assert config.models.det == str(Path.home() / "det")
    # Not paths, or none: kept as written.
    assert config.models.rec == "embedded:PP-OCRv6_small_rec"
    assert config.models.cls == ""
    assert config.engine.trt_cache_dir == ""


def test_the_defaults_a_file_leaves_out_are_the_projects(tmp_path: Path, elsewhere: Path) -> None:
    """A config with a few keys, written anywhere (the bench's and the soak's in their output
    folders), finds the conversions `make convert` put in the clone."""
    (tmp_path / "config.toml").write_text('[server]\nport = 9000\n[models.sets.fr]\nrec = "fr"\n')
    config = load_config(Path("..") / "config.toml")
    assert config.engine.onnx_dir == str(defaults_base() / "var/models/onnx")
    # The data a server keeps stays beside its file: each config its own job store.
    assert config.jobs.data_dir == str(tmp_path / "var/jobs")
    assert config.models.sets["fr"].rec == str(tmp_path / "fr")  # the file's own: its folder


def test_a_linked_file_keeps_the_links_folder(tmp_path: Path, elsewhere: Path) -> None:
    """Kubernetes mounts a ConfigMap's file as a link into a dated folder."""
    (tmp_path / "..data").mkdir()
    (tmp_path / "..data/config.toml").write_text('[jobs]\ndata_dir = "jobs"\n')
    (tmp_path / "mount").mkdir()
    (tmp_path / "mount/config.toml").symlink_to(tmp_path / "..data/config.toml")
    assert load_config(tmp_path / "mount/config.toml").jobs.data_dir == str(tmp_path / "mount/jobs")


def test_the_environments_paths_are_relative_to_the_working_directory(
    tmp_path: Path, elsewhere: Path
) -> None:
    (tmp_path / "config.toml").write_text('[jobs]\ndata_dir = "jobs"\n')
    env = {"OCR_JOBS__DATA_DIR": "here/jobs", "OCR_ENGINE__ONNX_DIR": "/abs/onnx"}
    config = load_config(tmp_path / "config.toml", env)
    assert config.jobs.data_dir == str(elsewhere / "here/jobs")
    assert config.engine.onnx_dir == "/abs/onnx"


def test_without_a_file_the_defaults_are_the_projects(elsewhere: Path) -> None:
    """The defaults are config.toml's values, so they point where config.toml's do."""
    assert defaults_base() == REPO_ROOT
    config = load_config(None)
    assert config == load_config(REPO_ROOT / "config.toml")
    assert config.engine.onnx_dir == str(REPO_ROOT / "var/models/onnx")
    assert config == with_paths_resolved(AppConfig(), REPO_ROOT)


def test_convert_finds_the_configs_conversions_from_anywhere(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m serving.convert --config <clone>/config.toml`, run outside the clone, finds the
    conversions `make convert` made (before, it looked in ./var/models/onnx and converted again)."""
    monkeypatch.delenv("OCR_ENGINE__ONNX_DIR", raising=False)
    onnx_dir = REPO_ROOT / "var/models/onnx"
    spec = load_model_spec(embedded_model_dir("PP-OCRv5_mobile_det"), "det")
    try:
        onnx_spec(spec, onnx_dir)
    except ModelConversionError:
        pytest.skip("no conversion here: run make convert")
    missing_converter = elsewhere / "no-paddle2onnx"
    status = run.main(
        ["--config", str(REPO_ROOT / "config.toml"), "--converter", str(missing_converter)]
    )
    assert status == 0, capsys.readouterr()
    assert "(cached)" in capsys.readouterr().out
    assert not (elsewhere / "var").exists()


def test_a_missing_conversion_names_the_folder_it_looked_in(elsewhere: Path) -> None:
    spec = load_model_spec(embedded_model_dir("PP-OCRv5_mobile_det"), "det")
    with pytest.raises(ModelConversionError) as raised:
        onnx_spec(spec, Path("var/models/onnx"))
    message = str(raised.value)
    assert f"no ONNX conversion in {elsewhere / 'var/models/onnx'} " in message
    assert "python -m serving.convert" in message
    assert os.fspath(elsewhere) in message


def test_packaged_models_are_laid_out_in_the_clone_not_the_working_directory(
    elsewhere: Path,
) -> None:
    """`ocr-batch` run in another folder left a `var/models/packaged` there."""
    assert packaged.DEFAULT_DIR == REPO_ROOT / "var/models/packaged"


def test_an_installed_package_lays_them_out_in_its_environment(tmp_path: Path) -> None:
    """Outside a source tree (the image's wheel), in `sys.prefix`, laid out at build time: the
    image's server could not write them into its read-only home."""
    assert packaged.default_dir(tmp_path) == Path(sys.prefix) / "var/models/packaged"
