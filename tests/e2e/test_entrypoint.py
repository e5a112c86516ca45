"""`ocr-serve` started the way the container image starts it: no flags, the config file named by
OCR_CONFIG and OCR_<SECTION>__<KEY> overrides; then its health check, request ids and JSON logs."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server, free_port, stop_server, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def image_environment(tmp: Path, port: int) -> dict[str, str]:
    """The Dockerfile's ENV with this machine's port, devices and paths."""
    config = tmp / "etc-ocr" / "config.toml"
    config.parent.mkdir()
    shutil.copy(REPO_ROOT / "config.toml", config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCR_")}
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "OCR_CONFIG": str(config),
            # The image binds 0.0.0.0; the test stays on loopback.
            "OCR_SERVER__HOST": "127.0.0.1",
            "OCR_SERVER__PORT": str(port),
            "OCR_SERVER__LOG_FORMAT": "json",
            "OCR_WORKERS__DEVICES": '["cpu"]',
            "OCR_WORKERS__CPU_WORKERS": "1",
            "OCR_PADDLEX__VISUALIZE": "false",
            "OCR_JOBS__DATA_DIR": str(tmp / "jobs"),
            # The image's ONNX conversions are at a fixed path; here, `make convert`'s.
            "OCR_ENGINE__ONNX_DIR": str(REPO_ROOT / "var" / "models" / "onnx"),
        }
    )
    return env


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("entrypoint")
    port = free_port()
    env = image_environment(tmp, port)
    log = tmp / "server.log"
    process = subprocess.Popen(
        [str(BIN / "ocr-serve")],  # the image's CMD
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp,
    )
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        wait_ready(server)
        yield server, env
    finally:
        stop_server(server)


def test_serves_readyz_on_the_port_from_the_environment(served) -> None:
    server, env = served
    response = httpx.get(f"{server.url}/readyz")
    assert response.status_code == 200
    assert list(response.json()["devices"]) == ["cpu#0", "cpu#1"]  # config.toml: cpu_instances = 2
    # The image's HEALTHCHECK command, with the image's environment.
    check = subprocess.run(
        [sys.executable, "-m", "serving.healthcheck"], env=env, capture_output=True, timeout=30
    )
    assert check.returncode == 0, check.stderr


def test_request_id_header_and_log_id(served) -> None:
    server, _ = served
    mine = httpx.get(f"{server.url}/livez", headers={"X-Request-ID": "e2e-livez-1"})
    assert mine.headers["x-request-id"] == "e2e-livez-1"
    made = httpx.get(f"{server.url}/livez").headers["x-request-id"]
    assert len(made) == 32

    png = images.encode_png(images.latin_lines().image)
    body = {"file": base64.b64encode(png).decode(), "fileType": 1}
    answer = httpx.post(f"{server.url}/ocr", json=body, headers={"X-Request-ID": "e2e-ocr-1"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["logId"] == "e2e-ocr-1" == answer.headers["x-request-id"]
    answer = httpx.post(f"{server.url}/ocr", json=body, timeout=120)
    assert answer.json()["logId"] == answer.headers["x-request-id"]
    answer = httpx.post(f"{server.url}/ocr", json={**body, "logId": "from-body"}, timeout=120)
    assert answer.json()["logId"] == "from-body"
    assert answer.headers["x-request-id"] != "from-body"

    bad = httpx.post(
        f"{server.url}/v1/ocr",
        content=b"garbage",
        headers={"content-type": "image/png", "X-Request-ID": "e2e-bad-1"},
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["request_id"] == "e2e-bad-1" == bad.headers["x-request-id"]


def test_logs_are_json_lines_with_request_ids(served) -> None:
    server, _ = served
    httpx.post(
        f"{server.url}/v1/ocr",
        content=b"garbage",
        headers={"content-type": "image/png", "X-Request-ID": "e2e-log-1"},
    )
    # The access line is written when the response has gone; give the server a moment.
    entries: list[dict[str, object]] = []
    for _ in range(50):
        entries = [
            json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")
        ]
        if any(e["request_id"] == "e2e-log-1" for e in entries):
            break
        httpx.get(f"{server.url}/livez")
    access = [e for e in entries if e["request_id"] == "e2e-log-1"]
    assert access, server.log.read_text()[-2000:]
    assert access[0]["logger"] == "serving.access"
    assert str(access[0]["message"]).startswith("POST /v1/ocr 422 ")
    processes = {e["process"] for e in entries}
    assert {"main", "device[cpu#0]", "device[cpu#1]"} <= processes
    assert any(e["message"] == "Application startup complete." for e in entries)
    assert any(str(e["message"]).startswith("effective configuration") for e in entries)
