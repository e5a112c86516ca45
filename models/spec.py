"""Model directory description: which files to load and the settings read from inference.yml."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import yaml

from pipelines.page_orientation import ANGLES, OriParams
from pipelines.types import ClsParams, DetParams, RecParams

ModelKind = Literal["det", "rec", "cls", "ori"]
MODEL_KINDS: tuple[ModelKind, ...] = ("det", "rec", "cls", "ori")

ModelFormat = Literal["paddle", "onnx"]
"""How a model is stored: a Paddle program + params, or an ONNX graph (`inference.onnx`)."""
MODEL_FORMATS: tuple[ModelFormat, ...] = get_args(ModelFormat)

PROGRAM_FILES = ("inference.json", "inference.pdmodel")
"""Program file names in order of preference: the PIR program first, the legacy one second."""
PARAMS_FILE = "inference.pdiparams"
CONFIG_FILE = "inference.yml"
ONNX_FILE = "inference.onnx"
"""An ONNX graph beside inference.yml; served as is by engines that read ONNX."""


YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (its wheels are): a recogniser's
inference.yml lists its whole dictionary (18,000 characters), which PyYAML's Python loader took
0.5 s to read, in every process that loads the set; libyaml reads it in a sixth of that, to the
same values (tests/unit/models/test_spec.py)."""


class ModelSpecError(ValueError):
    """A model directory is missing files or its inference.yml cannot be understood."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrtShapeRange:
    """TensorRT dynamic-shape range of one model input (from `Hpi.backend_configs.paddle_infer`)."""

    input_name: str
    min_shape: tuple[int, ...]
    opt_shape: tuple[int, ...]
    max_shape: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One inference model on disk and the settings its inference.yml carries.

    Exactly one of `det_params`, `rec_params`, `cls_params`, `ori_params` is set, matching
    `kind`.
    """

    kind: ModelKind
    model_name: str
    """`Global.model_name` from inference.yml, or the directory name when absent."""
    directory: Path
    program_file: Path | None = None
    """inference.json when present, else inference.pdmodel; None in an ONNX-only directory."""
    params_file: Path | None = None
    """inference.pdiparams, beside `program_file`."""
    onnx_file: Path | None = None
    """inference.onnx when the directory holds one."""
    det_params: DetParams | None = None
    """DB post-processing settings; resize limits stay at the OCR-pipeline defaults."""
    rec_params: RecParams | None = None
    character_dict: tuple[str, ...] = ()
    """`PostProcess.character_dict` as listed, without the CTC blank and space PaddleOCR adds."""
    cls_params: ClsParams | None = None
    ori_params: OriParams | None = None
    """Page-orientation classifier settings (`pipelines.page_orientation`)."""
    trt_dynamic_shapes: tuple[TrtShapeRange, ...] = ()

    def __post_init__(self) -> None:
        expected: dict[str, object] = {
            "det": self.det_params,
            "rec": self.rec_params,
            "cls": self.cls_params,
            "ori": self.ori_params,
        }
        if self.kind not in expected:
            raise ModelSpecError(f"unknown model kind {self.kind!r}: expected one of {MODEL_KINDS}")
        if expected[self.kind] is None:
            raise ModelSpecError(f"{self.kind} model spec for {self.directory} lacks its params")
        if self.kind == "rec" and not self.character_dict:
            raise ModelSpecError(f"rec model spec for {self.directory} has no character_dict")
        if (self.program_file is None) != (self.params_file is None):
            raise ModelSpecError(f"{self.directory}: a Paddle program needs its params file")
        if self.program_file is None and self.onnx_file is None:
            raise ModelSpecError(f"model spec for {self.directory} names no model file")

    @property
    def formats(self) -> frozenset[ModelFormat]:
        """Every format the directory holds the model in."""
        held: set[ModelFormat] = set()
        if self.program_file is not None:
            held.add("paddle")
        if self.onnx_file is not None:
            held.add("onnx")
        return frozenset(held)

    @property
    def format(self) -> ModelFormat:
        """The model's primary format: the Paddle program when there is one, else ONNX."""
        return "paddle" if self.program_file is not None else "onnx"

    @property
    def files(self) -> tuple[Path, ...]:
        """The files that make up the model, inference.yml included."""
        model = (self.program_file, self.params_file, self.onnx_file)
        return (*(f for f in model if f is not None), self.directory / CONFIG_FILE)

    @property
    def pixel_norm(self) -> ModelKind:
        """The stage whose normalisation its input pixels get (`pipelines.pixels.normalize`):
        its own, but "rec" for a PaddleOCR 2.x textline classifier (`ClsParams.keep_ratio`)."""
        if self.cls_params is not None and self.cls_params.keep_ratio:
            return "rec"
        return self.kind

    @property
    def is_pir(self) -> bool:
        """Whether the program is a PIR (inference.json) program."""
        return self.program_file is not None and self.program_file.suffix == ".json"


def load_model_spec(directory: Path, kind: str) -> ModelSpec:
    """Read a model directory's files and inference.yml into a `ModelSpec`.

    Args:
        directory: Folder holding inference.yml and the model: inference.{json|pdmodel} with
            inference.pdiparams (Paddle), inference.onnx (ONNX), or both.
        kind: "det", "rec", "cls" or "ori".

    Raises:
        ModelSpecError: a file is missing, the YAML is invalid, or a required setting is absent.
    """
    if kind not in MODEL_KINDS:
        raise ModelSpecError(f"unknown model kind {kind!r}: expected one of {MODEL_KINDS}")
    model_kind: ModelKind = kind
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelSpecError(f"model directory {directory} does not exist or is not a directory")
    onnx_file: Path | None = directory / ONNX_FILE
    if onnx_file is not None and not onnx_file.is_file():
        onnx_file = None
    program_file = _find_program_file(directory, required=onnx_file is None)
    params_file = _require_file(directory / PARAMS_FILE) if program_file is not None else None
    config_path = _require_file(directory / CONFIG_FILE)
    config = _read_yaml(config_path)

    global_section = _mapping(config.get("Global", {}), config_path, "Global")
    model_name = str(global_section.get("model_name") or directory.name)
    trt_shapes = _parse_trt_shapes(config, config_path)

    det_params: DetParams | None = None
    rec_params: RecParams | None = None
    cls_params: ClsParams | None = None
    ori_params: OriParams | None = None
    character_dict: tuple[str, ...] = ()
    if model_kind == "det":
        det_params = _parse_det(config, config_path)
    elif model_kind == "rec":
        rec_params, character_dict = _parse_rec(config, config_path)
    elif model_kind == "ori":
        ori_params = _parse_ori(config, config_path)
    else:
        cls_params = _parse_cls(config, config_path)

    return ModelSpec(
        kind=model_kind,
        model_name=model_name,
        directory=directory,
        program_file=program_file,
        params_file=params_file,
        onnx_file=onnx_file,
        det_params=det_params,
        rec_params=rec_params,
        character_dict=character_dict,
        cls_params=cls_params,
        ori_params=ori_params,
        trt_dynamic_shapes=trt_shapes,
    )


def _find_program_file(directory: Path, *, required: bool) -> Path | None:
    for name in PROGRAM_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    if not required:
        return None
    names = " or ".join((*PROGRAM_FILES, ONNX_FILE))
    raise ModelSpecError(f"model directory {directory} has no program file ({names})")


def _require_file(path: Path) -> Path:
    if not path.is_file():
        raise ModelSpecError(f"missing model file {path}")
    return path


def _read_yaml(path: Path) -> Mapping[str, Any]:
    try:
        stat = path.stat()
    except OSError as err:
        raise ModelSpecError(f"cannot read {path}: {err}") from err
    return _parsed_yaml(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


@functools.lru_cache(maxsize=32)
def _parsed_yaml(path: Path, mtime_ns: int, size: int, inode: int) -> Mapping[str, Any]:
    """One version of a file (as its size, inode and mtime tell), read once a process: a set's
    specs are loaded by several parts of each process (its bundle, the precision check, the
    engines). What it returns is only read."""
    try:
        with path.open("r", encoding="utf-8") as f:
            loaded = yaml.load(f, Loader=YAML_LOADER)
    except (OSError, yaml.YAMLError) as err:
        raise ModelSpecError(f"cannot read {path}: {err}") from err
    return _mapping(loaded, path, "top level")


def _mapping(value: object, path: Path, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelSpecError(f"{path}: {where} must be a mapping, got {type(value).__name__}")
    return cast(Mapping[str, Any], value)


def _sequence(value: object, path: Path, where: str) -> Sequence[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ModelSpecError(f"{path}: {where} must be a list, got {type(value).__name__}")
    return value


def _number(section: Mapping[str, Any], key: str, default: float, path: Path) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelSpecError(f"{path}: PostProcess.{key} must be a number, got {value!r}")
    return float(value)


def _int(value: object, path: Path, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelSpecError(f"{path}: {where} must be an integer, got {value!r}")
    return value


def _transform_op(config: Mapping[str, Any], name: str, path: Path) -> Mapping[str, Any] | None:
    """Return the arguments of the first `PreProcess.transform_ops` entry called `name`."""
    pre = _mapping(config.get("PreProcess", {}), path, "PreProcess")
    ops = _sequence(pre.get("transform_ops", []), path, "PreProcess.transform_ops")
    for op in ops:
        if isinstance(op, Mapping) and name in op:
            return _mapping(op[name] or {}, path, f"PreProcess {name}")
    return None


def _post_process(config: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
    if "PostProcess" not in config:
        raise ModelSpecError(f"{path}: no PostProcess section")
    return _mapping(config["PostProcess"], path, "PostProcess")


def _parse_det(config: Mapping[str, Any], path: Path) -> DetParams:
    post = _post_process(config, path)
    name = post.get("name")
    if name != "DBPostProcess":
        raise ModelSpecError(f"{path}: det PostProcess.name must be DBPostProcess, got {name!r}")
    defaults = DetParams()
    max_candidates = _int(
        post.get("max_candidates", defaults.max_candidates), path, "PostProcess.max_candidates"
    )
    return DetParams(
        thresh=_number(post, "thresh", defaults.thresh, path),
        box_thresh=_number(post, "box_thresh", defaults.box_thresh, path),
        unclip_ratio=_number(post, "unclip_ratio", defaults.unclip_ratio, path),
        max_candidates=max_candidates,
    )


def _parse_rec(config: Mapping[str, Any], path: Path) -> tuple[RecParams, tuple[str, ...]]:
    resize = _transform_op(config, "RecResizeImg", path)
    if resize is None or "image_shape" not in resize:
        raise ModelSpecError(f"{path}: no PreProcess RecResizeImg.image_shape")
    shape = _sequence(resize["image_shape"], path, "RecResizeImg.image_shape")
    if len(shape) != 3:
        raise ModelSpecError(f"{path}: RecResizeImg.image_shape must be [C, H, W], got {shape}")
    height = _int(shape[1], path, "RecResizeImg.image_shape[1]")
    width = _int(shape[2], path, "RecResizeImg.image_shape[2]")

    post = _post_process(config, path)
    if post.get("name") != "CTCLabelDecode":
        raise ModelSpecError(
            f"{path}: rec PostProcess.name must be CTCLabelDecode, got {post.get('name')!r}"
        )
    chars = _sequence(post.get("character_dict"), path, "PostProcess.character_dict")
    if not chars:
        raise ModelSpecError(f"{path}: PostProcess.character_dict is empty")
    # YAML may type an unquoted entry (e.g. `- 0`); PaddleOCR's own dict files are plain text.
    return RecParams(image_height=height, min_width=width), tuple(str(c) for c in chars)


def _parse_cls(config: Mapping[str, Any], path: Path) -> ClsParams:
    legacy = _transform_op(config, "ClsResizeImg", path)
    if legacy is not None:
        return _parse_legacy_cls(config, legacy, path)
    resize = _transform_op(config, "ResizeImage", path)
    if resize is None or "size" not in resize:
        raise ModelSpecError(f"{path}: no PreProcess ResizeImage.size (textline classifier)")
    size = resize["size"]
    if isinstance(size, int) and not isinstance(size, bool):
        width = height = size
    else:
        pair = _sequence(size, path, "ResizeImage.size")
        if len(pair) != 2:
            raise ModelSpecError(f"{path}: ResizeImage.size must be [W, H], got {pair}")
        # PaddleX's Resize takes target_size as (width, height).
        width = _int(pair[0], path, "ResizeImage.size[0]")
        height = _int(pair[1], path, "ResizeImage.size[1]")

    post = _post_process(config, path)
    topk = _mapping(post.get("Topk", {}), path, "PostProcess.Topk")
    labels = _sequence(topk.get("label_list"), path, "PostProcess.Topk.label_list")
    if not labels:
        raise ModelSpecError(f"{path}: PostProcess.Topk.label_list is empty")
    return ClsParams(
        image_height=height, image_width=width, labels=tuple(str(label) for label in labels)
    )


def _parse_legacy_cls(
    config: Mapping[str, Any], resize: Mapping[str, Any], path: Path
) -> ClsParams:
    """A PaddleOCR 2.x textline classifier's settings (ch_ppocr_mobile_v2.0_cls): `ClsResizeImg`
    `image_shape` [C, H, W] and `ClsPostProcess` `label_list` and `cls_thresh`."""
    shape = _sequence(resize.get("image_shape"), path, "ClsResizeImg.image_shape")
    if len(shape) != 3:
        raise ModelSpecError(f"{path}: ClsResizeImg.image_shape must be [C, H, W], got {shape}")
    post = _post_process(config, path)
    labels = _sequence(post.get("label_list"), path, "PostProcess.label_list")
    if not labels:
        raise ModelSpecError(f"{path}: PostProcess.label_list is empty")
    return ClsParams(
        image_height=_int(shape[1], path, "ClsResizeImg.image_shape[1]"),
        image_width=_int(shape[2], path, "ClsResizeImg.image_shape[2]"),
        labels=tuple(str(label) for label in labels),
        keep_ratio=True,
        min_upside_down_score=_number(post, "cls_thresh", 0.9, path),
    )


def _parse_ori(config: Mapping[str, Any], path: Path) -> OriParams:
    """A page classifier's inference.yml: `ResizeImage.resize_short`, `CropImage.size` and
    `PostProcess.Topk.label_list` (angles), as PaddleX's PP-LCNet_x1_0_doc_ori carries them."""
    resize = _transform_op(config, "ResizeImage", path)
    crop = _transform_op(config, "CropImage", path)
    if resize is None or "resize_short" not in resize or crop is None or "size" not in crop:
        raise ModelSpecError(
            f"{path}: no PreProcess ResizeImage.resize_short and CropImage.size (page classifier)"
        )
    post = _post_process(config, path)
    topk = _mapping(post.get("Topk", {}), path, "PostProcess.Topk")
    labels = tuple(str(label) for label in _sequence(topk.get("label_list"), path, "label_list"))
    if sorted(labels) != sorted(str(a) for a in ANGLES):
        raise ModelSpecError(f"{path}: PostProcess.Topk.label_list must be the angles {ANGLES}")
    return OriParams(
        resize_short_px=_int(resize["resize_short"], path, "ResizeImage.resize_short"),
        crop_px=_int(crop["size"], path, "CropImage.size"),
        labels=labels,
    )


def _parse_trt_shapes(config: Mapping[str, Any], path: Path) -> tuple[TrtShapeRange, ...]:
    hpi = config.get("Hpi")
    if not isinstance(hpi, Mapping):
        return ()
    backends = hpi.get("backend_configs")
    if not isinstance(backends, Mapping):
        return ()
    paddle_infer = backends.get("paddle_infer")
    if not isinstance(paddle_infer, Mapping) or "trt_dynamic_shapes" not in paddle_infer:
        return ()
    where = "Hpi.backend_configs.paddle_infer.trt_dynamic_shapes"
    shapes = _mapping(paddle_infer["trt_dynamic_shapes"], path, where)
    ranges: list[TrtShapeRange] = []
    for input_name, triple in shapes.items():
        # PaddleX reads the three shapes as [min, opt, max].
        entries = _sequence(triple, path, f"{where}.{input_name}")
        if len(entries) != 3:
            raise ModelSpecError(f"{path}: {where}.{input_name} must list [min, opt, max] shapes")
        dims = [
            tuple(_int(d, path, f"{where}.{input_name}") for d in _sequence(e, path, where))
            for e in entries
        ]
        ranges.append(
            TrtShapeRange(
                input_name=str(input_name), min_shape=dims[0], opt_shape=dims[1], max_shape=dims[2]
            )
        )
    return tuple(ranges)
