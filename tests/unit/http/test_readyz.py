"""`/readyz` and NotReady: pids and the start-up error go to loopback callers only; anyone else
gets the status (and `{"ready": ...}`), and no 503 names the start-up error."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any, cast

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from serving.app import middleware
from serving.config import AppConfig, AuthConfig
from serving.errors import NotReady
from serving.http.keys import hash_key
from serving.http.routes import readyz
from serving.service.runtime import Runtime

DETAIL: dict[str, Any] = {
    "ready": False,
    "devices": {"cpu#0": {"ready": False, "pid": 4242, "restarts": 0}},
    "cpu_workers": {"pids": [4243], "restarts": 0},
    "error": "Start-up failed: /opt/models/det/inference.pdiparams: no such file",
}


def _client(address: str, *, ready: bool = False, config: AppConfig | None = None) -> TestClient:
    stack = [] if config is None else middleware(config, {})
    app = Starlette(routes=[Route("/readyz", readyz)], middleware=stack)
    readiness = types.SimpleNamespace(ready=ready, describe=lambda: DETAIL)
    app.state.services = types.SimpleNamespace(readiness=readiness)
    return TestClient(app, client=(address, 40000))


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.6", "::1", "::ffff:127.0.0.1"])
def test_loopback_callers_get_the_detail(address: str) -> None:
    response = _client(address).get("/readyz")
    assert response.status_code == 503
    assert response.json() == DETAIL


@pytest.mark.parametrize("address", ["10.1.2.3", "203.0.113.7", "fd00::2", "testclient"])
def test_other_callers_get_the_status_only(address: str) -> None:
    response = _client(address).get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"ready": False}
    ready = _client(address, ready=True).get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"ready": True})


def test_not_ready_after_a_failed_start_does_not_say_why() -> None:
    runtime = types.SimpleNamespace(started=asyncio.Event(), startup_error=DETAIL["error"])
    with pytest.raises(NotReady) as caught:
        Runtime.check_ready(cast(Runtime, runtime))
    assert "/opt/models" not in caught.value.message
    assert "log" in caught.value.message
    runtime.startup_error = None
    with pytest.raises(NotReady, match="not loaded yet"):
        Runtime.check_ready(cast(Runtime, runtime))


def test_with_keys_an_admin_key_gets_the_detail_and_a_user_key_does_not(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "ops"\nrole = "admin"\nsha256 = "{hash_key("admin-secret")}"\n'
        f'[[keys]]\nid = "app"\nrole = "user"\nsha256 = "{hash_key("user-secret")}"\n'
    )
    config = AppConfig(auth=AuthConfig(keys_file=str(keys), api_keys_env=""))
    client = _client("203.0.113.7", config=config)
    assert client.get("/readyz", headers={"X-API-Key": "admin-secret"}).json() == DETAIL
    for headers in ({"X-API-Key": "user-secret"}, {"X-API-Key": "wrong"}, {}):
        answer = client.get("/readyz", headers=headers)
        assert (answer.status_code, answer.json()) == (503, {"ready": False})  # a probe: no 401
