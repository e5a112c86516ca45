"""Unit tests for serving/http/request_id.py, serving/request_context.py and the request id in
log lines (serving/log_config.py)."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from serving import request_context
from serving.http.request_id import RequestIdMiddleware
from serving.log_config import JsonFormatter, RequestIdFilter, configure_logging


async def echo(request: Request) -> Response:
    return JSONResponse({"seen": request_context.current()})


@pytest.fixture
def client() -> TestClient:
    app = Starlette(routes=[Route("/", echo)])
    app.add_middleware(RequestIdMiddleware)
    return TestClient(app)


def test_a_new_id_is_made_and_returned(client: TestClient) -> None:
    first = client.get("/")
    second = client.get("/")
    assert first.json()["seen"] == first.headers["x-request-id"]
    assert len(first.headers["x-request-id"]) == 32
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


def test_the_clients_id_is_kept(client: TestClient) -> None:
    response = client.get("/", headers={"X-Request-ID": "trace-42.a:b"})
    assert response.headers["x-request-id"] == "trace-42.a:b"
    assert response.json()["seen"] == "trace-42.a:b"


@pytest.mark.parametrize("sent", ["", "x" * 129, "two words", "line\\nbreak", 'quote"'])
def test_unsafe_ids_are_replaced(client: TestClient, sent: str) -> None:
    response = client.get("/", headers={"X-Request-ID": sent})
    assert response.headers["x-request-id"] != sent
    assert len(response.headers["x-request-id"]) == 32


def test_outside_a_request_there_is_no_id() -> None:
    assert request_context.current() is None
    assert len(request_context.current_or_new()) == 32


def _record(message: str = "hello %s", *args: object) -> logging.LogRecord:
    return logging.LogRecord("serving.test", logging.INFO, __file__, 1, message, args, None)


def test_filter_stamps_records_with_the_request_id(client: TestClient) -> None:
    record = _record()
    assert RequestIdFilter().filter(record)
    assert record.request_id == "-"  # type: ignore[attr-defined]

    seen: list[str] = []

    async def log(request: Request) -> Response:
        record = _record()
        RequestIdFilter().filter(record)
        seen.append(record.request_id)  # type: ignore[attr-defined]
        return Response()

    app = Starlette(routes=[Route("/", log)])
    app.add_middleware(RequestIdMiddleware)
    TestClient(app).get("/", headers={"X-Request-ID": "abc"})
    assert seen == ["abc"]


def test_json_lines() -> None:
    record = _record("batch size=%d", 3)
    RequestIdFilter().filter(record)
    line = JsonFormatter(process_name="device[cpu]").format(record)
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["message"] == "batch size=3"
    assert entry["level"] == "info"
    assert entry["logger"] == "serving.test"
    assert entry["process"] == "device[cpu]"
    assert entry["request_id"] == "-"
    assert entry["time"].endswith("+00:00")


def test_json_lines_carry_tracebacks() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), exc_info=sys.exc_info()
        )
    entry = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in entry["exc_info"]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_configure_logging_writes_the_format(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("info", process_name="main", log_format=log_format)
        logging.getLogger("serving.test").info("hello %s", "world")
        err = capsys.readouterr().err.strip().splitlines()[-1]
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    if log_format == "json":
        assert json.loads(err)["message"] == "hello world"
    else:
        assert err.endswith("INFO [main] - serving.test: hello world")


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log_format"):
        configure_logging("info", log_format="xml")


def test_one_access_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    async def ok(request: Request) -> Response:
        return Response(status_code=201)

    app = Starlette(routes=[Route("/v1/ocr", ok, methods=["POST"]), Route("/livez", ok)])
    app.add_middleware(RequestIdMiddleware)
    client = TestClient(app)
    with caplog.at_level(logging.DEBUG, logger="serving.access"):
        client.post("/v1/ocr", headers={"X-Request-ID": "r1"})
        client.get("/livez")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "serving.access"]
    assert lines[0][0] == logging.INFO
    assert lines[0][1].startswith("POST /v1/ocr 201 ")
    assert lines[1][0] == logging.DEBUG  # probes are quiet
    assert lines[1][1].startswith("GET /livez 201 ")
