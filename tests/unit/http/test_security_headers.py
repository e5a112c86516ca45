"""serving/http/security_headers.py: every answer carries the CSP and the other headers, and the
CSP allows what the web page's own files load (Chromium checks the page itself:
tests/e2e/test_web_ui.py)."""

from __future__ import annotations

import re
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from serving.app import middleware
from serving.config import AppConfig
from serving.http.security_headers import CONTENT_SECURITY_POLICY, HEADERS

STATIC = resources.files("serving.http").joinpath("static")


async def _ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def _own_policy(request: Request) -> Response:
    return Response("x", headers={"Content-Security-Policy": "default-src 'self'"})


def _client(environ: dict[str, str]) -> TestClient:
    routes = [Route("/v1/ocr", _ok, methods=["POST"]), Route("/own", _own_policy)]
    app = Starlette(routes=routes, middleware=middleware(AppConfig(), environ))
    return TestClient(app, base_url="http://localhost")


def test_answers_and_errors_carry_every_header() -> None:
    for environ in ({}, {"OCR_API_KEYS": "k1"}):
        client = _client(environ)
        for response in (client.post("/v1/ocr"), client.get("/no-such-path")):
            for name, value in HEADERS:
                assert response.headers[name.decode()] == value.decode(), (environ, name)
    policy = _client({}).get("/no-such-path").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "script-src 'self'" in policy


def test_a_routes_own_header_is_kept() -> None:
    response = _client({}).get("/own")
    assert response.headers["content-security-policy"] == "default-src 'self'"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert len(response.headers.get_list("content-security-policy")) == 1


def test_the_pages_need_nothing_the_policy_refuses() -> None:
    """No inline script, style or handler, and every script and stylesheet from this server:
    what `script-src 'self'` and `style-src 'self'` (no 'unsafe-inline') require."""
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    for name in ("index.html", "docs.html"):
        html = STATIC.joinpath(name).read_text(encoding="utf-8")
        scripts = re.findall(r"<script\b([^>]*)>", html)
        assert scripts
        assert all(re.search(r'src="/static/[\w.-]+\.js"', attrs) for attrs in scripts), name
        assert "<style" not in html
        assert not re.search(r"\sstyle=", html)
        assert not re.search(r"\son[a-z]+=", html)
        for href in re.findall(r'<link [^>]*href="([^"]+)"', html):
            assert href.startswith("/static/"), href
    for name in ("app.js", "docs.js"):
        code = STATIC.joinpath(name).read_text(encoding="utf-8")
        assert "eval(" not in code
        assert "new Function" not in code
        assert "innerHTML" not in code
        assert 'setAttribute("style"' not in code
