"""serving/http/hosts.py: with API keys off, only Host headers no DNS-rebinding page can send are
answered (`server.allowed_hosts` adds names), and browsers' requests only from the server's own
pages or `server.cors_origins`; with keys on the key is the check."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from serving.app import middleware
from serving.config import AppConfig, ServerConfig
from serving.errors import ConfigError
from serving.http.hosts import host_allowed, host_name, origin_allowed


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8000",
        "127.0.0.1",
        "[::1]:8000",
        "[fd00::2]",
        "10.1.2.3:8000",  # a pod's IP: the kubelet's probes
        "localhost:8000",  # docker run -p 8000:8000, then localhost:8000
        "LOCALHOST",
        "localhost.",
        "app.localhost:8000",
    ],
)
def test_ip_literals_and_localhost_pass_without_configuration(host: str) -> None:
    assert host_allowed(host, ())


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8000",  # the rebinding page's own name
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "testserver",
        "ocr-serving:8000",
        "",
        "::1",  # an IPv6 address needs its brackets in Host
    ],
)
def test_other_names_are_refused_without_configuration(host: str) -> None:
    assert not host_allowed(host, ())


def test_listed_names_and_wildcards_pass() -> None:
    allowed = ("ocr.example.com", "*.svc.cluster.local")
    assert host_allowed("ocr.example.com:443", allowed)
    assert host_allowed("OCR.example.com", allowed)
    assert host_allowed("ocr-serving.ns.svc.cluster.local:8000", allowed)
    assert not host_allowed("svc.cluster.local", allowed)
    assert not host_allowed("evil.example", allowed)
    assert not host_allowed("ocr.example.com.evil.example", allowed)
    assert host_allowed("evil.example", ("*",))


def test_host_name_drops_port_and_brackets() -> None:
    assert host_name("[::1]:8000") == "::1"
    assert host_name("Example.COM:80") == "example.com"
    assert host_name("example.com") == "example.com"


@pytest.mark.parametrize(
    "entry", ["http://ocr.example", "ocr.example:8000", "a/b", "", "*.", "a b"]
)
def test_bad_allowed_hosts_entries_are_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.allowed_hosts"):
        ServerConfig(allowed_hosts=(entry,))


async def _ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _client(config: AppConfig, environ: dict[str, str]) -> TestClient:
    routes = [Route(path, _ok, methods=["GET", "POST"]) for path in ("/v1/jobs", "/ocr")]
    app = Starlette(routes=routes, middleware=middleware(config, environ))
    return TestClient(app, base_url="http://localhost")


def test_with_keys_off_a_foreign_host_gets_400_json_in_each_apis_format() -> None:
    client = _client(AppConfig(), {})
    refused = client.get("/v1/jobs", headers={"Host": "evil.example:8000"})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "host_not_allowed"
    assert "server.allowed_hosts" in error["message"]
    assert error["request_id"] == refused.headers["x-request-id"]
    assert refused.headers["x-content-type-options"] == "nosniff"
    paddlex = client.post("/ocr", headers={"Host": "evil.example"}, json={})
    assert paddlex.status_code == 400
    assert paddlex.json()["errorCode"] == 400
    assert client.get("/v1/jobs", headers={"Host": "127.0.0.1:8000"}).status_code == 200
    assert client.get("/v1/jobs", headers={"Host": "localhost:8000"}).status_code == 200


def test_allowed_hosts_opens_named_hosts() -> None:
    config = AppConfig(server=ServerConfig(allowed_hosts=("ocr.example.com",)))
    client = _client(config, {})
    assert client.get("/v1/jobs", headers={"Host": "ocr.example.com"}).status_code == 200
    assert client.get("/v1/jobs", headers={"Host": "evil.example"}).status_code == 400


def test_with_keys_on_the_key_is_the_check() -> None:
    client = _client(AppConfig(), {"OCR_API_KEYS": "k1"})
    answer = client.get("/v1/jobs", headers={"Host": "evil.example", "X-API-Key": "k1"})
    assert answer.status_code == 200
    assert client.get("/v1/jobs", headers={"Host": "evil.example"}).status_code == 401


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),  # the web page at / posting to /v1/ocr
        ("http://localhost", "localhost:80"),
        ("https://ocr.example.com", "OCR.example.com:443"),
        ("http://[::1]:8000", "[::1]:8000"),
    ],
)
def test_a_pages_own_origin_passes(origin: str, host: str) -> None:
    assert origin_allowed(origin, host, ())


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("https://evil.example", "127.0.0.1:8000"),  # a form post from another site
        ("http://127.0.0.1:9000", "127.0.0.1:8000"),  # another port is another origin
        ("null", "127.0.0.1:8000"),  # a sandboxed frame or a file: page
        ("http://localhost:8000", "127.0.0.1:8000"),
    ],
)
def test_another_origin_is_refused(origin: str, host: str) -> None:
    assert not origin_allowed(origin, host, ())


def test_cors_origins_are_allowed_origins() -> None:
    assert origin_allowed("https://app.example", "127.0.0.1:8000", ("https://app.example",))
    assert not origin_allowed("https://evil.example", "127.0.0.1:8000", ("https://app.example",))


def test_with_keys_off_another_sites_request_gets_403_and_its_own_pages_pass() -> None:
    client = _client(AppConfig(), {})
    refused = client.post("/v1/jobs", headers={"Origin": "https://evil.example"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "cross_origin_refused"
    paddlex = client.post("/ocr", headers={"Origin": "https://evil.example"}, json={})
    assert (paddlex.status_code, paddlex.json()["errorCode"]) == (403, 403)
    own = client.post(
        "/v1/jobs", headers={"Host": "localhost:8000", "Origin": "http://localhost:8000"}
    )
    assert own.status_code == 200
    assert client.post("/v1/jobs").status_code == 200  # no Origin: not a browser's cross-site call


def test_with_keys_on_a_key_adding_proxy_lends_its_key_to_no_other_site() -> None:
    """Issue 49: with keys on the key was the only check, but a proxy that adds the key (the
    web page's way with keys) lent it to any page a browser ran: a cross-site POST, or a DNS
    rebinding onto its address. Now Origin is checked, and Host once allowed_hosts names some."""
    keys_on = _client(AppConfig(), {"OCR_API_KEYS": "k1"})
    key = {"X-API-Key": "k1"}
    cross = keys_on.post("/v1/jobs", headers={"Origin": "https://evil.example", **key})
    assert cross.status_code == 403
    assert "API keys on" in cross.json()["error"]["message"]
    own = {"Host": "ocr.example", "Origin": "http://ocr.example", **key}
    assert keys_on.post("/v1/jobs", headers=own).status_code == 200  # its own pages
    assert keys_on.post("/v1/jobs", headers={"Host": "any.example", **key}).status_code == 200
    listed = AppConfig(server=ServerConfig(allowed_hosts=("ocr.example",)))
    named = _client(listed, {"OCR_API_KEYS": "k1"})
    rebound = named.get("/v1/jobs", headers={"Host": "evil.example", **key})
    assert rebound.status_code == 400
    assert rebound.json()["error"]["code"] == "host_not_allowed"
    assert named.get("/v1/jobs", headers={"Host": "ocr.example", **key}).status_code == 200
