"""Paddle models as ONNX, converted ahead of serving and cached by content.

The ONNX engines (OpenVINO, ONNX Runtime) cannot read Paddle's PIR `inference.json`, so a Paddle
model is converted once with Paddle's own converter, `paddle2onnx` (PaddleX's `--paddle2onnx`).
The converter pins `onnx<=1.17`, so it lives in its own virtual environment (`make convert`
makes `.venv-convert`); the converted models load in current onnxruntime and openvino.

Each conversion lands in `<cache>/<key>/` (`inference.onnx`, the source's `inference.yml`, and
`provenance.json`), where the key hashes the source model's files and the opset: the same
model converts once, a changed one converts again. A model directory that already holds
`inference.onnx` is served as is. Nothing converts at request time or at server start:

    python -m serving.convert --config config.toml      # or: make convert

(`serving.convert` reads the config and hands the models to `convert_models`: models/ knows
nothing of the server's config.)
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from models.base import EngineBackendError
from models.embedded import resolve_model_dir
from models.engine_options import EngineOptions
from models.packaged import file_sha256
from models.spec import CONFIG_FILE, ONNX_FILE, ModelKind, ModelSpec, load_model_spec

logger = logging.getLogger(__name__)

OPSET = 14
"""ONNX opset asked of the converter (it raises it where an operator needs more)."""
DEFAULT_CACHE_DIR = Path("var/models/onnx")
"""Where conversions are kept (`[engine] onnx_dir`, relative to the config file's folder)."""
CONVERTER_VENV = Path(".venv-convert")
"""The converter's own environment, made by `make convert` in the project's folder."""
PROJECT_DIR = Path(__file__).resolve().parents[1]
"""The source tree this package runs from, where it does (`make convert` makes its venv there)."""
PROVENANCE_FILE = "provenance.json"
"""Written last: a cache entry without it is incomplete and never used."""
CONVERT_COMMAND = (
    "make convert in the project, or python -m serving.convert --config <your config.toml> "
    "(it converts into that config's engine.onnx_dir)"
)


class ModelConversionError(EngineBackendError):
    """A model an engine needs as ONNX has no conversion, or the converter failed."""


def source_hashes(spec: ModelSpec) -> dict[str, str]:
    """File name -> SHA-256 of every file of a Paddle model (program, params, inference.yml)."""
    return {path.name: file_sha256(path) for path in spec.files if path.suffix != ".onnx"}


def cache_key(hashes: dict[str, str], opset: int = OPSET) -> str:
    """The cache entry's name: a hash over the source files' hashes and the opset."""
    text = json.dumps({"files": dict(sorted(hashes.items())), "opset": opset}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cache_entry(spec: ModelSpec, cache_dir: Path, opset: int = OPSET) -> Path:
    """The directory the conversion of `spec` has (or will have) in `cache_dir`."""
    return Path(cache_dir) / cache_key(source_hashes(spec), opset)


def find_onnx(spec: ModelSpec, cache_dir: Path, opset: int = OPSET) -> ModelSpec | None:
    """`spec` as an ONNX model: itself when its directory holds one, else its complete cached
    conversion, else None. Reads and hashes files; converts nothing."""
    if spec.onnx_file is not None:
        return spec
    entry = cache_entry(spec, cache_dir, opset)
    if not (entry / PROVENANCE_FILE).is_file():
        return None
    return load_model_spec(entry, spec.kind)


def onnx_spec(spec: ModelSpec, cache_dir: Path, opset: int = OPSET) -> ModelSpec:
    """`spec` as an ONNX model, for code that needs the ONNX path of a configured model.

    Raises:
        ModelConversionError: it is a Paddle model that has not been converted; the message
            names the command that converts it.
    """
    found = find_onnx(spec, cache_dir, opset)
    if found is None:
        raise ModelConversionError(
            f"{spec.kind} model {spec.model_name} ({spec.directory}) has no ONNX conversion in "
            f"{Path(cache_dir).absolute()} (engine.onnx_dir); the ONNX engines need one: run "
            f"{CONVERT_COMMAND}"
        )
    return found


def prepare_onnx(spec: ModelSpec, options: EngineOptions) -> ModelSpec:
    """The ONNX engines' `EngineBackend.prepare`: the cached conversion in `options.onnx_dir`."""
    return onnx_spec(spec, Path(options.onnx_dir))


def paddle2onnx_argv(
    paddle2onnx: Path, spec: ModelSpec, save_file: Path, opset: int = OPSET
) -> list[str]:
    """The converter's command line for one Paddle model directory."""
    if spec.program_file is None or spec.params_file is None:
        raise ModelConversionError(f"{spec.directory} holds no Paddle program to convert")
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
        str(opset),
    ]


CONVERTER = "paddle2onnx"
CONVERTER_PACKAGES = ("paddle2onnx", "paddlepaddle", "onnx")
"""What a conversion's provenance names the versions of."""


def default_converter(command: str = CONVERTER) -> Path | None:
    """`.venv-convert`'s `command` (paddle2onnx here, x2paddle for `models.paddle_convert`), in
    the working directory, else in the project's folder, else one on PATH, else None."""
    for venv in (CONVERTER_VENV, PROJECT_DIR / CONVERTER_VENV):
        local = venv / "bin" / command
        if local.is_file():
            return local
    found = shutil.which(command)
    return Path(found) if found else None


def converter_versions(
    converter: Path, packages: tuple[str, ...] = CONVERTER_PACKAGES
) -> dict[str, str]:
    """Versions of the converter's `packages`, asked of the Python beside it."""
    python = converter.parent / "python"
    code = (
        "import importlib.metadata as m, json, sys\n"
        "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
    )
    try:
        out = subprocess.run(
            [str(python), "-c", code, *packages],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        versions: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return versions


def convert(
    spec: ModelSpec, cache_dir: Path, paddle2onnx: Path, opset: int = OPSET
) -> tuple[ModelSpec, bool]:
    """The ONNX form of `spec`, converting it into the cache unless it is there already.

    Returns:
        The ONNX spec, and whether a conversion ran now.

    Raises:
        ModelConversionError: the converter failed (its output is in the message).
    """
    found = find_onnx(spec, cache_dir, opset)
    if found is not None:
        return found, False
    hashes = source_hashes(spec)
    entry = Path(cache_dir) / cache_key(hashes, opset)
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        argv = paddle2onnx_argv(paddle2onnx, spec, work / ONNX_FILE, opset)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as err:
            raise ModelConversionError(f"cannot run {paddle2onnx}: {err}") from err
        (work / "convert.out").write_text(done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0 or not (work / ONNX_FILE).is_file():
            tail = (done.stdout + done.stderr)[-2000:]
            raise ModelConversionError(
                f"paddle2onnx failed on {spec.directory} (exit {done.returncode}): {tail}"
            )
        shutil.copyfile(spec.directory / CONFIG_FILE, work / CONFIG_FILE)
        provenance = _provenance(spec, hashes, paddle2onnx, opset, argv)
        provenance["onnx_sha256"] = file_sha256(work / ONNX_FILE)
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
    spec: ModelSpec, hashes: dict[str, str], paddle2onnx: Path, opset: int, argv: list[str]
) -> dict[str, Any]:
    return {
        "kind": spec.kind,
        "model_name": spec.model_name,
        "source_dir": str(spec.directory),
        "source_sha256": hashes,
        "opset_requested": opset,
        "converter": converter_versions(paddle2onnx),
        "command": [Path(argv[0]).name, *argv[1:]],
        "converted_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def read_provenance(spec: ModelSpec) -> dict[str, Any] | None:
    """The provenance beside a cached conversion, or None for a model served as is."""
    path = spec.directory / PROVENANCE_FILE
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return loaded


def convert_models(
    refs: Mapping[str, str], cache_dir: Path, converter: Path | None, opset: int = OPSET
) -> int:
    """Convert the models `refs` names (directories or `embedded:` names) that have no conversion
    in `cache_dir` yet, printing a line a model; `make convert`'s exit status: 0, 1 where the
    converter failed, 2 where one is needed and `converter` is None. A key is a model kind, or a
    model set's stage ("rec@korean": the kind before the "@")."""
    for stage, ref in refs.items():
        kind = cast(ModelKind, stage.partition("@")[0])
        spec = load_model_spec(resolve_model_dir(ref), kind)
        found = find_onnx(spec, cache_dir, opset)
        if found is None:
            if converter is None:
                print(
                    "paddle2onnx not found: make convert creates .venv-convert with it",
                    file=sys.stderr,
                )
                return 2
            try:
                found, _ = convert(spec, cache_dir, converter, opset)
            except ModelConversionError as err:
                print(err, file=sys.stderr)
                return 1
            state = "converted"
        else:
            state = "as is" if found is spec else "cached"
        print(f"{stage} {ref}: {found.onnx_file} ({state})")
    return 0


if __name__ == "__main__":
    # The command moved to serving/ (it reads the server's config); say so rather than do nothing.
    sys.exit(f"The conversion command is now: {CONVERT_COMMAND}")
