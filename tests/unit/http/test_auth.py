"""Unit tests for serving/http/auth.py (API keys) and the CORS switch in serving/app.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from serving.app import middleware
from serving.config import AppConfig, AuthConfig, ServerConfig, load_config
from serving.errors import ConfigError
from serving.http import auth
from serving.http.keys import ApiKey, identify, load_keys, plain_key_id
from serving.metrics import Metrics
from tests.local_client import local_client

KEYS = ("key-one", "key-two")


def _keys(*secrets: str) -> tuple[ApiKey, ...]:
    return load_keys(AuthConfig(), {"OCR_API_KEYS": ",".join(secrets)})


async def _ok(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _app(keys: tuple[str, ...] = KEYS, *, protect_metrics: bool = False) -> auth.ApiKeyMiddleware:
    paths = ["/ocr", "/v1/ocr", "/livez", "/readyz", "/health", "/metrics", "/", "/docs"]
    routes = [Route(path, _ok, methods=["GET", "POST"]) for path in paths]
    app = Starlette(routes=routes)
    return auth.ApiKeyMiddleware(app, keys=_keys(*keys), protect_metrics=protect_metrics)


@pytest.fixture
def client() -> TestClient:
    return TestClient(_app())


@pytest.mark.parametrize("path", ["/v1/ocr", "/", "/docs", "/metrics-not"])
def test_missing_key_is_401_json(client: TestClient, path: str) -> None:
    response = client.post(path) if path == "/v1/ocr" else client.get(path)
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "unauthorized"
    assert "missing" in error["message"]
    assert "request_id" in error
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_paddlex_endpoint_gets_its_envelope(client: TestClient) -> None:
    response = client.post("/ocr", json={"file": "x", "fileType": 1})
    assert response.status_code == 401
    body = response.json()
    assert list(body) == ["logId", "errorCode", "errorMsg"]
    assert body["errorCode"] == 401
    assert "API key" in body["errorMsg"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-API-Key": "key-one"},
        {"X-API-Key": "key-two"},
        {"Authorization": "Bearer key-one"},
        {"Authorization": "bearer  key-two "},
    ],
)
def test_valid_key_passes(client: TestClient, headers: dict[str, str]) -> None:
    response = client.post("/v1/ocr", headers=headers)
    assert response.status_code == 200
    assert response.json() == {"ok": True}


@pytest.mark.parametrize(
    "headers",
    [
        {"X-API-Key": "key-three"},
        {"X-API-Key": "key-one-and-more"},
        {"X-API-Key": "key"},
        {"X-API-Key": ""},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic a2V5LW9uZTo="},
        {"Authorization": "key-one"},
    ],
)
def test_wrong_key_is_401(client: TestClient, headers: dict[str, str]) -> None:
    response = client.post("/v1/ocr", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("path", ["/livez", "/readyz", "/health", "/metrics"])
def test_probes_and_metrics_are_exempt(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200


def test_protect_metrics() -> None:
    client = TestClient(_app(protect_metrics=True))
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"X-API-Key": "key-one"}).status_code == 200
    assert client.get("/livez").status_code == 200


def test_no_keys_means_auth_off() -> None:
    client = TestClient(_app(keys=()))
    assert client.post("/v1/ocr").status_code == 200
    assert client.post("/ocr").status_code == 200


def test_identify_finds_the_key_by_its_hash() -> None:
    keys = _keys("a", "b", "c")
    found = identify(b"b", keys)
    assert found is not None
    assert found.id == plain_key_id("b")
    assert identify(b"d", keys) is None
    assert identify(b"a", ()) is None


def test_sent_key_prefers_x_api_key() -> None:
    headers = [(b"authorization", b"Bearer from-bearer"), (b"x-api-key", b"from-header")]
    assert auth.sent_key(headers) == b"from-header"
    assert auth.sent_key([(b"authorization", b"Bearer from-bearer")]) == b"from-bearer"
    assert auth.sent_key([(b"authorization", b"Bearer ")]) is None
    assert auth.sent_key([]) is None


# --- loading keys ---------------------------------------------------------------------------


def _ids(keys: tuple[ApiKey, ...]) -> list[str]:
    return [key.identity.id for key in keys]


def test_keys_from_environment() -> None:
    config = AuthConfig()
    keys = load_keys(config, {"OCR_API_KEYS": " a1 , b2,,a1 "})
    assert _ids(keys) == [plain_key_id("a1"), plain_key_id("b2")]
    assert load_keys(config, {}) == ()
    assert _ids(load_keys(AuthConfig(api_keys_env="MY_KEYS"), {"MY_KEYS": "k"})) == [
        plain_key_id("k")
    ]
    assert load_keys(AuthConfig(api_keys_env=""), {"OCR_API_KEYS": "k"}) == ()


def test_keys_from_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# deploy keys\nfile-one\n\n  file-two  \n")
    config = AuthConfig(api_keys_file=str(path))
    keys = load_keys(config, {"OCR_API_KEYS": "env-one"})
    assert _ids(keys) == [plain_key_id(k) for k in ("env-one", "file-one", "file-two")]


def test_unreadable_key_file_is_config_error(tmp_path: Path) -> None:
    config = AuthConfig(api_keys_file=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"auth\.api_keys_file"):
        load_keys(config, {})


# --- config and the middleware stack --------------------------------------------------------


def test_auth_config_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[auth]\napi_keys_env = "K"\napi_keys_file = "/run/secrets/keys"\nprotect_metrics = true\n'
        '[server]\ncors_origins = ["https://app.example", "http://localhost:3000"]\n'
    )
    config = load_config(path)
    assert config.auth == AuthConfig(
        api_keys_env="K", api_keys_file="/run/secrets/keys", protect_metrics=True
    )
    assert config.server.cors_origins == ("https://app.example", "http://localhost:3000")


def test_auth_config_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[auth]\napi_keys = "inline keys are not supported"\n')
    with pytest.raises(ConfigError, match=r"auth\.api_keys: unknown key"):
        load_config(path)


@pytest.mark.parametrize("origin", ["app.example", "https://app.example/path", "ftp://x"])
def test_bad_cors_origin(origin: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.cors_origins"):
        ServerConfig(cors_origins=(origin,))


def _stack_app(config: AppConfig, environ: dict[str, str]) -> Starlette:
    routes = [Route(p, _ok, methods=["GET", "POST"]) for p in ("/v1/ocr", "/livez")]
    return Starlette(routes=routes, middleware=middleware(config, environ))


def test_cors_off_by_default() -> None:
    client = local_client(_stack_app(AppConfig(), {}))
    response = client.post("/v1/ocr", headers={"Origin": "https://evil.example"})
    assert response.status_code == 403  # keys off: another site's request is refused (hosts.py)
    assert "access-control-allow-origin" not in response.headers
    preflight = client.options(
        "/v1/ocr",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers


def test_cors_listed_origins_only_and_preflight_needs_no_key() -> None:
    config = AppConfig(server=ServerConfig(cors_origins=("https://app.example",)))
    client = TestClient(_stack_app(config, {"OCR_API_KEYS": "k1"}))
    preflight = client.options(
        "/v1/ocr",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-api-key",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    ok = client.post("/v1/ocr", headers={"Origin": "https://app.example", "X-API-Key": "k1"})
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "https://app.example"
    assert "x-request-id" in ok.headers
    other = client.post("/v1/ocr", headers={"Origin": "https://evil.example", "X-API-Key": "k1"})
    assert "access-control-allow-origin" not in other.headers
    refused = client.post("/v1/ocr", headers={"Origin": "https://app.example"})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "https://app.example"
    assert refused.json()["error"]["request_id"] == refused.headers["x-request-id"]


def test_stack_without_keys_is_open() -> None:
    client = local_client(_stack_app(AppConfig(), {}))
    assert client.post("/v1/ocr").status_code == 200


# --- identities, rates and metrics ----------------------------------------------------------


async def _whoami(request: Request) -> Response:
    identity = auth.identity_of(request)
    return JSONResponse(None if identity is None else {"id": identity.id, "role": identity.role})


def _rated_app(
    keys: tuple[ApiKey, ...], metrics: Metrics, now: list[float]
) -> auth.ApiKeyMiddleware:
    app = Starlette(routes=[Route("/whoami", _whoami), Route("/ocr", _ok, methods=["POST"])])
    return auth.ApiKeyMiddleware(
        app, keys=keys, protect_metrics=False, metrics=metrics, clock=lambda: now[0]
    )


def test_the_identity_travels_in_the_scope() -> None:
    config = AuthConfig(requests_per_s=0.0)
    keys = load_keys(config, {"OCR_API_KEYS": "key-one"})
    client = TestClient(_rated_app(keys, Metrics(), [0.0]))
    answer = client.get("/whoami", headers={"X-API-Key": "key-one"}).json()
    assert answer == {"id": plain_key_id("key-one"), "role": "user"}
    open_app = Starlette(routes=[Route("/whoami", _whoami)])
    assert TestClient(open_app).get("/whoami").json() is None  # authentication off: anonymous


def test_a_key_past_its_rate_gets_429_with_retry_after_and_others_do_not() -> None:
    config = AuthConfig(requests_per_s=0.5, burst_requests=2)
    keys = load_keys(config, {"OCR_API_KEYS": "key-one,key-two"})
    now = [100.0]
    client = TestClient(_rated_app(keys, Metrics(), now))
    one, two = {"X-API-Key": "key-one"}, {"X-API-Key": "key-two"}
    assert [client.get("/whoami", headers=one).status_code for _ in range(2)] == [200, 200]
    refused = client.get("/whoami", headers=one)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"  # one token every 2 s
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert "key-one" not in refused.text
    assert client.get("/whoami", headers=two).status_code == 200
    paddlex = client.post("/ocr", headers=one)
    assert paddlex.status_code == 429
    assert paddlex.json()["errorCode"] == 429
    now[0] += 2.0
    assert client.get("/whoami", headers=one).status_code == 200


def test_metrics_count_requests_by_key_id_never_the_secret() -> None:
    keys = load_keys(AuthConfig(requests_per_s=1.0), {"OCR_API_KEYS": "key-one"})
    metrics = Metrics()
    client = TestClient(_rated_app(keys, metrics, [0.0]))
    client.get("/whoami", headers={"X-API-Key": "key-one"})
    client.get("/whoami", headers={"X-API-Key": "key-one"})
    client.get("/whoami", headers={"X-API-Key": "wrong"})
    text = metrics.render().decode()
    key_id = plain_key_id("key-one")
    assert f'ocr_key_requests_total{{key="{key_id}",status="200"}} 1.0' in text
    assert f'ocr_key_requests_total{{key="{key_id}",status="429"}} 1.0' in text
    assert 'ocr_key_requests_total{key="-",status="401"} 1.0' in text
    assert "key-one" not in text
    assert "wrong" not in text
