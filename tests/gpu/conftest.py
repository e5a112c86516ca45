"""GPU tests: skipped without a CUDA GPU and torch; pages and models from a GPU bundle or here.

`make gpu-bundle` prepares what a GPU machine without Paddle or network needs: the converted
models (`OCR_GPU_MODELS`: det/ and rec/ holding inference.onnx and inference.yml) and test pages
with the texts Paddle read on them here (`OCR_GPU_PAGES`: expected.json and PNGs). Without those
variables the configured models' conversions and freshly rendered pages are used, read by
Paddle on the CPU (which must then be installed).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from serving.config import AppConfig, ModelsConfig
from tests.conftest import ONE_SET


def cuda_devices() -> int:
    """CUDA GPUs torch can use (0 without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


ON_CPU_ENV = "OCR_GPU_TESTS_ON_CPU"
"""Set to 1 on a machine without a GPU to run the torch GPU tests' logic on the CPU instead:
slow (minutes on two cores), and no claim about GPUs; it catches what would fail for no GPU
reason on the one GPU run."""


def torch_test_device() -> str | None:
    """Where the torch GPU tests run: "gpu:0" where torch sees CUDA, "cpu" where `ON_CPU_ENV`
    asks for it, else None (they skip)."""
    if cuda_devices() > 0:
        return "gpu:0"
    return "cpu" if os.environ.get(ON_CPU_ENV) == "1" else None


DEVICE = torch_test_device()
requires_cuda = pytest.mark.skipif(
    DEVICE is None, reason=f"needs a CUDA GPU and torch (or {ON_CPU_ENV}=1: their logic on the CPU)"
)


@dataclasses.dataclass(frozen=True)
class Pages:
    images: dict[str, np.ndarray]
    expected: dict[str, list[str]]
    """The texts Paddle (CPU) reads on each page."""


def load_pages(directory: Path) -> Pages:
    """Pages written by `loadtest.gpu_bundle`: expected.json names each PNG and its texts."""
    manifest = json.loads((directory / "expected.json").read_text("utf-8"))
    images = {}
    for name, entry in manifest.items():
        image = cv2.imread(str(directory / entry["file"]), cv2.IMREAD_COLOR)
        if image is None:
            raise FileNotFoundError(directory / entry["file"])
        images[name] = image
    return Pages(images, {name: list(e["texts"]) for name, e in manifest.items()})


@pytest.fixture(scope="session")
def gpu_models() -> ModelsConfig:
    models = os.environ.get("OCR_GPU_MODELS")
    if models:
        return ModelsConfig(det=str(Path(models) / "det"), rec=str(Path(models) / "rec"))
    return ONE_SET  # PP-OCRv5 mobile, whose texts Paddle reads (`render_pages`)


@pytest.fixture(scope="session")
def gpu_pages() -> Pages:
    directory = os.environ.get("OCR_GPU_PAGES")
    if directory:
        return load_pages(Path(directory))
    pytest.importorskip("paddle", reason="expected texts need Paddle here, or OCR_GPU_PAGES")
    from tests.gpu.bundle import render_pages

    return render_pages()


def bucketed_options(engine: Any) -> Any:
    """A `LocalEngine`'s page options with bucketed batching's padding: what a GPU server
    runs (`[engine] batching = "auto"`), so CPU and GPU texts are compared at one batching."""
    from loadtest.gpu.check import bucketed_options as options

    return options(engine)


@pytest.fixture(scope="session")
def cpu_texts(gpu_models: ModelsConfig, gpu_pages: Pages) -> dict[str, list[str]]:
    """The same engine on this machine's CPU, bucketed as a GPU server batches (issue 40: exact
    CPU texts against a bucketed GPU server differed for a reason unrelated to the GPU): what
    the GPU must read exactly in fp32. Paddle's texts,
    read elsewhere, can differ with the OpenCV: with opencv-python-headless 5.1 in place of
    4.x one line of 93 reads "7o09" where Paddle read "7oo9", on ONNX Runtime as on torch.
    OpenCV 5's `minAreaRect` returns the same rectangles with width and height swapped and the
    angle 90 degrees off; their corners differ by 1e-4 px, the line crops by up to 7 grey
    levels, enough to tip one borderline character."""
    from serving.config import EngineConfig
    from serving.engine.local import LocalEngine

    engine = EngineConfig()
    config = AppConfig(
        models=gpu_models,
        engine=dataclasses.replace(engine, cpu_backend="torch", cpu_threads=4, batching="bucketed"),
    )
    local = LocalEngine(config)
    local.load()
    options = bucketed_options(local)
    return {
        name: [ln.text for ln in local.ocr(img, options).lines]
        for name, img in gpu_pages.images.items()
    }
