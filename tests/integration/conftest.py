"""A real server (real models, real worker processes) inside the test process, via TestClient."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from serving.app import build_app
from serving.config import AppConfig, PaddlexConfig, WorkersConfig
from serving.runtime import Runtime
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
def app_config() -> AppConfig:
    return AppConfig(
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
