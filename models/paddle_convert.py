"""ONNX models in Paddle Inference's format, converted ahead of serving with X2Paddle and cached.

The Paddle engine (`cpu_backend`/`gpu_backend = "paddle"`, the one Paddle's GPU build runs)
reads Paddle programs only, and the default set, PP-OCRv6 small, ships as ONNX (rapidocr's
wheel). X2Paddle 1.6 (PaddlePaddle's converter, `x2paddle --framework onnx`) turns an ONNX model
into a Paddle program and its weights; it needs Paddle and onnx, and declares neither (nor six
and requests, which it imports), so it lives in the converter's environment beside paddle2onnx
(`make convert-paddle` adds it to `.venv-convert`). Its output held the text: PP-OCRv6 small
converted so reads the same text as the ONNX model on ONNX Runtime and OpenVINO f32 (docs/models.md,
PP-OCRv6 on the Paddle engine; `tests/integration/test_paddle_reads_onnx.py`).

Each conversion lands in `<cache>/<key>/` (`inference.json` or `inference.pdmodel`,
`inference.pdiparams`, the source's `inference.yml`, `provenance.json`), the key a hash of the
ONNX file and the converter's name: the same model converts once. Nothing converts at request
time or at server start:

    python -m serving.convert --paddle --config config.toml      # or: make convert-paddle
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from models import convert as onnx_convert
from models.convert import PROVENANCE_FILE, ModelConversionError
from models.embedded import resolve_model_dir
from models.engine_options import EngineOptions
from models.packaged import file_sha256
from models.spec import CONFIG_FILE, PARAMS_FILE, ModelKind, ModelSpec, load_model_spec

DEFAULT_CACHE_DIR = Path("var/models/paddle")
"""Where conversions are kept (`[engine] paddle_dir`, relative to the config file's folder)."""
CONVERTER = "x2paddle"
CONVERTER_PACKAGES = ("x2paddle", "paddlepaddle", "onnx")
CONVERT_COMMAND = (
    "make convert-paddle in the project, or python -m serving.convert --paddle --config <your "
    "config.toml> (it converts into that config's engine.paddle_dir)"
)
CONVERTS_TO_PADDLE: frozenset[str] = frozenset({"det", "rec"})
"""The model kinds converted: X2Paddle 1.6 fails on the packaged classifiers (the page
classifier's HardSwish is not among its operators; the text-line classifier's constant names,
`Constant@0`, make the Python it writes invalid), so the Paddle engine serves neither (a device
worker on it leaves page orientation to the others: `without_unread_orientation`)."""
_SAVED = {"model.json": "inference.json", "model.pdmodel": "inference.pdmodel"}
"""X2Paddle's `inference_model/` program (PIR JSON on Paddle 3, the old program before) -> ours."""


def cache_entry(spec: ModelSpec, cache_dir: Path) -> Path:
    """The directory the conversion of ONNX model `spec` has (or will have) in `cache_dir`."""
    if spec.onnx_file is None:
        raise ModelConversionError(f"{spec.directory} holds no ONNX model to convert")
    text = json.dumps({"onnx": file_sha256(spec.onnx_file), "converter": CONVERTER})
    return Path(cache_dir) / hashlib.sha256(text.encode()).hexdigest()[:32]


def find_paddle(spec: ModelSpec, cache_dir: Path) -> ModelSpec | None:
    """`spec` as a Paddle model: itself when its directory holds a Paddle program, else its
    complete cached conversion, else None. Hashes the ONNX file; converts nothing."""
    if spec.program_file is not None:
        return spec
    entry = cache_entry(spec, cache_dir)
    if not (entry / PROVENANCE_FILE).is_file():
        return None
    return load_model_spec(entry, spec.kind)


def paddle_spec(spec: ModelSpec, cache_dir: Path) -> ModelSpec:
    """`spec` as a Paddle model, for the Paddle engine.

    Raises:
        ModelConversionError: it is an ONNX model that has not been converted; the message names
            the command that converts it.
    """
    found = find_paddle(spec, cache_dir)
    if found is None and spec.kind not in CONVERTS_TO_PADDLE:
        raise ModelConversionError(
            f"{spec.kind} model {spec.model_name} ({spec.directory}) is ONNX only, and X2Paddle "
            "does not convert it: the Paddle engine does not serve it"
        )
    if found is None:
        raise ModelConversionError(
            f"{spec.kind} model {spec.model_name} ({spec.directory}) is ONNX only and has no "
            f"Paddle conversion in {Path(cache_dir).absolute()} (engine.paddle_dir); the Paddle "
            f"engine needs one: run {CONVERT_COMMAND}"
        )
    return found


def prepare_paddle(spec: ModelSpec, options: EngineOptions) -> ModelSpec:
    """The Paddle engine's `EngineBackend.prepare`: the cached conversion in
    `options.paddle_dir`."""
    return paddle_spec(spec, Path(options.paddle_dir))


def default_converter() -> Path | None:
    """`.venv-convert`'s x2paddle (in the working directory, else in the project's folder), else
    one on PATH, else None."""
    return onnx_convert.default_converter(CONVERTER)


def x2paddle_argv(x2paddle: Path, onnx_file: Path, save_dir: Path) -> list[str]:
    """The converter's command line for one ONNX file (no usage report sent home)."""
    return [
        str(x2paddle),
        "--framework",
        "onnx",
        "--model",
        str(onnx_file),
        "--save_dir",
        str(save_dir),
        "--disable_feedback",
        "True",
    ]


def convert(spec: ModelSpec, cache_dir: Path, x2paddle: Path) -> tuple[ModelSpec, bool]:
    """The Paddle form of ONNX model `spec`, converting it into the cache unless it is there.

    Returns:
        The Paddle spec, and whether a conversion ran now.

    Raises:
        ModelConversionError: the converter failed (its output is in the message).
    """
    found = find_paddle(spec, cache_dir)
    if found is not None:
        return found, False
    entry = cache_entry(spec, cache_dir)
    onnx_file = cast(Path, spec.onnx_file)  # cache_entry refused a spec without one
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        argv = x2paddle_argv(x2paddle, onnx_file, work / "x2paddle")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as err:
            raise ModelConversionError(f"cannot run {x2paddle}: {err}") from err
        (work / "convert.out").write_text(done.stdout + done.stderr, encoding="utf-8")
        saved = work / "x2paddle" / "inference_model"
        program = next((saved / name for name in _SAVED if (saved / name).is_file()), None)
        if done.returncode != 0 or program is None or not (saved / "model.pdiparams").is_file():
            tail = (done.stdout + done.stderr)[-2000:]
            raise ModelConversionError(
                f"x2paddle failed on {onnx_file} (exit {done.returncode}): {tail}"
            )
        os.replace(program, work / _SAVED[program.name])
        os.replace(saved / "model.pdiparams", work / PARAMS_FILE)
        shutil.rmtree(work / "x2paddle")  # its generated code and a second copy of the weights
        shutil.copyfile(spec.directory / CONFIG_FILE, work / CONFIG_FILE)
        provenance = _provenance(spec, onnx_file, x2paddle, argv)
        (work / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", "utf-8")
        work.chmod(0o755)  # mkdtemp makes it private; the conversion is as readable as its source
        try:
            os.replace(work, entry)
        except OSError:
            if not (entry / PROVENANCE_FILE).is_file():  # not a concurrent conversion's result
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return load_model_spec(entry, spec.kind), True


def _provenance(
    spec: ModelSpec, onnx_file: Path, x2paddle: Path, argv: list[str]
) -> dict[str, Any]:
    return {
        "kind": spec.kind,
        "model_name": spec.model_name,
        "source_dir": str(spec.directory),
        "onnx_sha256": file_sha256(onnx_file),
        "converter": onnx_convert.converter_versions(x2paddle, CONVERTER_PACKAGES),
        "command": [Path(argv[0]).name, *argv[1:4], onnx_file.name, argv[5], "<work>", *argv[7:]],
        "converted_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def convert_models(refs: Mapping[str, str], cache_dir: Path, x2paddle: Path | None) -> int:
    """Convert the ONNX-only models `refs` names (directories or `embedded:` names; keys as
    `models.convert.convert_models`') that have no conversion in `cache_dir` yet, printing a line
    a model; Paddle models are left as they are. Exit status: 0, 1 where the converter failed, 2
    where one is needed and `x2paddle` is None."""
    for stage, ref in refs.items():
        kind = cast(ModelKind, stage.partition("@")[0])
        spec = load_model_spec(resolve_model_dir(ref), kind)
        found = find_paddle(spec, cache_dir)
        if found is None:
            if x2paddle is None:
                print("x2paddle not found: make convert-paddle installs it", file=sys.stderr)
                return 2
            try:
                found, _ = convert(spec, cache_dir, x2paddle)
            except ModelConversionError as err:
                print(err, file=sys.stderr)
                return 1
            state = "converted"
        else:
            state = "as is" if found is spec else "cached"
        print(f"{stage} {ref}: {found.program_file} ({state})")
    return 0
