"""Our Paddle models as ONNX files, for baselines that run ONNX Runtime (RapidOCR).

Conversion runs offline, in the baseline's own virtual environment, with Paddle's converter
(`paddle2onnx`, the tool PaddleX's `--paddle2onnx` uses); nothing is downloaded.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from models.spec import ModelSpec

# PaddleX's default; the converter raises it where an operator needs more (det goes to 11).
OPSET = 7


@dataclass(frozen=True, slots=True)
class OnnxModels:
    """Converted detector and recogniser, and the recogniser's dictionary as a keys file."""

    det: Path
    rec: Path
    keys: Path


def paddle2onnx_argv(paddle2onnx: Path, spec: ModelSpec, save_file: Path) -> list[str]:
    """The converter's command line for one model directory."""
    return [
        str(paddle2onnx),
        "--model_dir",
        str(spec.directory),
        "--model_filename",
        spec.program_file.name,
        "--params_filename",
        spec.params_file.name,
        "--save_file",
        str(save_file),
        "--opset_version",
        str(OPSET),
    ]


def write_keys(spec: ModelSpec, path: Path) -> Path:
    """The recogniser's characters one per line, as PaddleOCR's dictionary files hold them.

    Readers add the CTC blank in front and the space at the end, as `build_charset` does.
    """
    path.write_text("".join(f"{c}\n" for c in spec.character_dict), encoding="utf-8")
    return path


def export(venv: Path, det: ModelSpec, rec: ModelSpec, out_dir: Path) -> OnnxModels:
    """Convert both models with `venv`'s paddle2onnx into `out_dir`.

    Raises:
        subprocess.CalledProcessError: The converter failed (its output is in `out_dir`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paddle2onnx = venv / "bin" / "paddle2onnx"
    files = {}
    for spec in (det, rec):
        save_file = out_dir / f"{spec.kind}.onnx"
        with (out_dir / f"{spec.kind}.log").open("wb") as log:
            subprocess.run(
                paddle2onnx_argv(paddle2onnx, spec, save_file),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
            )
        files[spec.kind] = save_file
    return OnnxModels(files["det"], files["rec"], write_keys(rec, out_dir / "rec_keys.txt"))
