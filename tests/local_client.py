"""A TestClient that calls as a client on the server's own machine does (`http://localhost`, from
127.0.0.1), where TestClient's default (`Host: testserver`, from `testclient`) is a remote client
whose Host the check of `serving/http/hosts.py` refuses while API keys are off, and to whom
`/readyz` shows no detail."""

from __future__ import annotations

from starlette.testclient import TestClient
from starlette.types import ASGIApp


def local_client(app: ASGIApp) -> TestClient:
    """`TestClient(app)` as a client on the server's own machine."""
    return TestClient(app, base_url="http://localhost", client=("127.0.0.1", 50000))
