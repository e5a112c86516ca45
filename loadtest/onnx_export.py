"""Our Paddle models as ONNX files, for baselines that run ONNX Runtime (RapidOCR).

The conversion is `models.convert`'s, cached by content: the baselines read the very files our
ONNX engines serve. When the cache lacks a model, the baseline's own environment converts it
with Paddle's converter (`paddle2onnx`); nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.convert import DEFAULT_CACHE_DIR, convert, paddle2onnx_argv
from models.spec import ModelSpec

__all__ = ["OnnxModels", "export", "paddle2onnx_argv", "write_keys"]


@dataclass(frozen=True, slots=True)
class OnnxModels:
    """Converted detector and recogniser, and the recogniser's dictionary as a keys file."""

    det: Path
    rec: Path
    keys: Path


def write_keys(spec: ModelSpec, path: Path) -> Path:
    """The recogniser's characters one per line, as PaddleOCR's dictionary files hold them.

    Readers add the CTC blank in front and the space at the end, as `build_charset` does.
    """
    path.write_text("".join(f"{c}\n" for c in spec.character_dict), encoding="utf-8")
    return path


def export(
    venv: Path, det: ModelSpec, rec: ModelSpec, out_dir: Path, cache_dir: Path = DEFAULT_CACHE_DIR
) -> OnnxModels:
    """Both models as ONNX (cached conversions, else converted with `venv`'s paddle2onnx), and
    the recogniser's keys file in `out_dir`.

    Raises:
        models.convert.ModelConversionError: the converter failed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paddle2onnx = venv / "bin" / "paddle2onnx"
    files = {}
    for spec in (det, rec):
        onnx, _ = convert(spec, cache_dir, paddle2onnx)
        if onnx.onnx_file is None:  # convert() always returns a spec with its ONNX file
            raise ValueError(f"no ONNX file for {spec.directory}")
        files[spec.kind] = onnx.onnx_file
    return OnnxModels(files["det"], files["rec"], write_keys(rec, out_dir / "rec_keys.txt"))
