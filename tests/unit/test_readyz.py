"""`/readyz` and NotReady: pids and the start-up error go to loopback callers only; anyone else
gets the status (and `{"ready": ...}`), and no 503 names the start-up error."""

from __future__ import annotations

import asyncio
import types
from typing import Any, cast

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from serving.errors import NotReady
from serving.http.routes import readyz
from serving.runtime import Runtime

DETAIL: dict[str, Any] = {
    "ready": False,
    "devices": {"cpu#0": {"ready": False, "pid": 4242, "restarts": 0}},
    "cpu_workers": {"pids": [4243], "restarts": 0},
    "error": "Start-up failed: /opt/models/det/inference.pdiparams: no such file",
}


def _client(address: str, *, ready: bool = False) -> TestClient:
    app = Starlette(routes=[Route("/readyz", readyz)])
    app.state.runtime = types.SimpleNamespace(ready=ready, describe=lambda: DETAIL)
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
