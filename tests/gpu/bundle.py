"""What a GPU machine without Paddle or network needs for `scripts/gpu-check.sh`, in one folder.

    python -m tests.gpu.bundle --out .gpu-bundle     # or: make gpu-bundle

- models/det, models/rec: PP-OCRv5 mobile's ONNX conversions (`make convert`; named, as every
  test that compares with Paddle's text names it: the default set is PP-OCRv6 small), with their
  inference.yml and provenance.json: the server serves these directories as they are;
- pages/: test pages as PNGs and expected.json, the texts Paddle reads on them here (CPU), and
  read-with.json, the versions of Paddle, OpenCV and numpy that read them;
- wheels/: the packages the server needs that the GPU machine lacks, for CPython 3.12 manylinux
  x86_64 (`pip download`; the GPU machine installs them with --no-index);
- manifest.json: sizes, and the versions the pages were read with.

The folder must stay under the 64 MiB that can travel with the checkout (`--max-mib`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import cv2

from loadtest.gpu.check import READ_WITH_FILE, read_with
from models import convert
from models.bundle import load_bundle
from serving.config import AppConfig, EngineConfig
from tests.conftest import ONE_SET
from tests.gpu.conftest import Pages

GPU_WHEELS = (
    "onnx2torch==1.5.15",
    "pyclipper==1.4.0",
    "pypdfium2==5.15.2",
    "rapidfuzz==3.14.6",
    "starlette==1.10.0",
    "uvicorn==0.55.0",
    "python-multipart==0.0.34",
    # tests/conftest.py imports the PostgreSQL test helper, which imports psycopg.
    "psycopg==3.3.9",
    "psycopg-binary==3.3.9",
    # serving.decode reads images with Pillow; serving.outputs writes searchable PDFs (fpdf2,
    # pikepdf, and what they import); serving.batch shows progress with tqdm. Without them the
    # server does not import (found by the dry run in a Python 3.12 venv with only the machine's
    # packages: docs/gpus.md).
    "pillow==13.0.0",
    "fpdf2==2.8.9",
    "defusedxml==0.7.1",
    "fonttools==4.68.0",
    "pikepdf==10.18.0",
    "lxml==6.2.0",
    "tqdm==4.70.1",
    # uvicorn's command line imports click; tests/conftest.py imports hypothesis; the check's
    # per-test limit (GPU_TEST_TIMEOUT_S) is pytest-timeout's.
    "click==8.5.1",
    "hypothesis==6.170.17",
    "sortedcontainers==2.4.0",
    "pytest-timeout==2.4.0",
)
"""Runtime packages of the server missing on the GPU machine (which has torch, onnx, numpy,
opencv-python-headless, prometheus-client, PyYAML, httpx with h11, anyio, psutil, pytest,
packaging); pinned as in pyproject.toml (the packages they import as installed with it).
onnx2torch runs there on the machine's own torch and torchvision."""

PIP_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MAX_MIB = 60
"""The checkout (~2 MiB) travels with the bundle; 64 MiB in all."""


def render_pages(real_pages: int = 1) -> Pages:
    """Synthetic pages, the warm-up page and `real_pages` real document pages, with the texts
    Paddle reads on them on the CPU (Paddle must be installed)."""
    from serving.convert import pdf_pages
    from serving.engine.local import LocalEngine
    from serving.engine.warmup import warmup_image
    from tests import images

    chosen = {
        "warmup": warmup_image(),
        "latin": images.latin_lines().image,
        "chinese": images.chinese_lines().image,
        "dense": images.dense_page().image,
    }
    for pdf in pdf_pages.find_real_pdfs()[:real_pages]:
        chosen.update((page.label, page.image) for page in pdf_pages.text_pages(pdf, 1))
    # Paddle itself, whatever engine the CPU default is now, on PP-OCRv5 mobile's det and rec
    # alone (Paddle reads no ONNX page classifier; the check's servers read the bundle's det and
    # rec alone).
    config = AppConfig(
        models=ONE_SET,
        engine=dataclasses.replace(EngineConfig(), cpu_backend="paddle"),
    )
    engine = LocalEngine(config)
    engine.load()
    expected = {name: [ln.text for ln in engine.ocr(img).lines] for name, img in chosen.items()}
    return Pages(chosen, expected)


def write_pages(pages: Pages, out: Path) -> None:
    """The PNGs, expected.json, and the versions that read it (`READ_WITH_FILE`)."""
    import numpy
    import paddle

    out.mkdir(parents=True, exist_ok=True)
    versions = {"paddle": paddle.__version__, "opencv": cv2.__version__, "numpy": numpy.__version__}
    (out / READ_WITH_FILE).write_text(json.dumps(versions, indent=1) + "\n", "utf-8")
    manifest = {}
    for name, image in pages.images.items():
        cv2.imwrite(str(out / f"{name}.png"), image)
        manifest[name] = {"file": f"{name}.png", "texts": pages.expected[name]}
    (out / "expected.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1), "utf-8")


def copy_models(out: Path, cache_dir: Path) -> dict[str, str]:
    """PP-OCRv5 mobile's det/rec conversions into out/det and out/rec."""
    bundle = load_bundle(ONE_SET.det, ONE_SET.rec)
    sources = {}
    for spec in (bundle.det, bundle.rec):
        onnx = convert.onnx_spec(spec, cache_dir)  # raises, naming `make convert`, if absent
        target = out / spec.kind
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for path in onnx.files:
            shutil.copyfile(path, target / path.name)
        provenance = onnx.directory / convert.PROVENANCE_FILE
        if provenance.is_file():
            shutil.copyfile(provenance, target / provenance.name)
        sources[spec.kind] = str(onnx.directory)
    return sources


def pip_download_argv(
    requirements: Sequence[str], dest: Path, *, python_version: str = "3.12"
) -> list[str]:
    """`pip download` of binary wheels for CPython `python_version` on manylinux x86_64."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    argv += ["--python-version", python_version, "--implementation", "cp"]
    for platform in PIP_PLATFORMS:
        argv += ["--platform", platform]
    return [*argv, "-d", str(dest), *requirements]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.gpu.bundle", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(".gpu-bundle"))
    parser.add_argument("--python-version", default="3.12", help="of the GPU machine")
    parser.add_argument("--max-mib", type=float, default=MAX_MIB)
    parser.add_argument("--real-pages", type=int, default=1)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sources = copy_models(out / "models", Path(EngineConfig().onnx_dir))
    if not (out / "pages" / "expected.json").is_file():
        write_pages(render_pages(args.real_pages), out / "pages")
    wheels = out / "wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run(
        pip_download_argv(GPU_WHEELS, wheels, python_version=args.python_version), check=True
    )
    size = folder_bytes(out)
    manifest = {
        "bytes": size,
        "models": sources,
        "wheels": sorted(p.name for p in wheels.glob("*.whl")),
        "pages": sorted(p.name for p in (out / "pages").glob("*.png")),
        "pages_read_with": read_with(out / "pages"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    print(f"{out}: {size / 2**20:.1f} MiB")
    if size > args.max_mib * 2**20:
        print(f"over {args.max_mib} MiB: it would not travel", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
