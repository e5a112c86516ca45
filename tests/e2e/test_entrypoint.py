"""`ocr-serve` started the way the container image starts it: no flags, the config file named by
OCR_CONFIG and OCR_<SECTION>__<KEY> overrides; then its health check, request ids and JSON logs."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server

# config.toml as shipped (two device workers), JSON logs; this machine's port, devices and paths
# (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("image")


@pytest.fixture
def served(server: Server) -> tuple[Server, dict[str, str]]:
    """The server, and the environment it was started with."""
    return server, server.env


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
