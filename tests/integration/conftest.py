"""A real server (real models, real worker processes) inside the test process, via TestClient."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from models import convert
from models.bundle import load_bundle
from serving.app import build_app
from serving.config import AppConfig, EngineConfig, PaddlexConfig, WorkersConfig
from serving.service.runtime import Runtime
from tests.conftest import ONE_SET
from tests.local_client import local_client


def wait_ready(client: TestClient, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = client.get("/readyz")
        if response.status_code == 200:
            return
        if "error" in response.json():
            raise RuntimeError(response.json()["error"])
        time.sleep(0.2)
    raise TimeoutError("server did not become ready")


@pytest.fixture(scope="session")
def onnx_dir() -> str:
    """The configured cache, holding PP-OCRv5 mobile's conversions (`make convert`, which `make
    test` runs; converted here when only the converter is there). The default set, PP-OCRv6
    small, is ONNX already."""
    cache = Path(EngineConfig().onnx_dir)
    bundle = load_bundle(ONE_SET.det, ONE_SET.rec)
    missing = [s for s in (bundle.det, bundle.rec) if convert.find_onnx(s, cache) is None]
    converter = convert.default_converter()
    if missing and converter is None:
        pytest.skip(f"no ONNX conversions in {cache}: run {convert.CONVERT_COMMAND}")
    for spec in missing:
        if converter is not None:
            convert.convert(spec, cache, converter)
    return str(cache)


@pytest.fixture(scope="session")
def app_config() -> AppConfig:
    return AppConfig(
        # f32 on any CPU: tests compare these texts with PaddleOCR's (auto may pick bf16).
        engine=EngineConfig(openvino_precision="f32"),
        workers=dataclasses.replace(WorkersConfig(), cpu_workers=2, devices=("cpu",)),
        paddlex=PaddlexConfig(visualize=False),
    )


@pytest.fixture(scope="session")
def client(app_config: AppConfig) -> Iterator[TestClient]:
    runtime = Runtime.build(app_config)
    with local_client(build_app(runtime)) as test_client:
        wait_ready(test_client)
        test_client.app_state = runtime  # type: ignore[attr-defined]
        yield test_client
