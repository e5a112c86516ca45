"""A client that hangs up mid-upload is a 499 logged at INFO on every endpoint that reads a body,
not a 500 with a traceback (nor, on `/v1/jobs`, an exception out of the ASGI app)."""

from __future__ import annotations

import asyncio
import logging
import types
from pathlib import Path
from typing import cast

import pytest
from starlette.types import Message

from serving.app import build_app
from serving.config import AppConfig, JobsConfig
from serving.jobs.runner import JobRunner
from serving.jobs.staging import UploadSlots
from serving.jobs.store.sqlite import SqliteJobStore as JobStore
from serving.jobs.store.types import PageTask
from serving.metrics import Metrics
from serving.scheduling.memory_budget import MemoryBudget
from serving.service.runtime import Runtime

PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
MULTIPART = "multipart/form-data; boundary=xyz"
MULTIPART_HEAD = (
    b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
    b"Content-Type: image/png\r\n\r\n" + PNG_HEAD
)


async def _never(task: PageTask) -> object:
    raise AssertionError("no page runs here")


def _runtime(tmp_path: Path) -> Runtime:
    # Only what the endpoints touch before and while they read the body; no worker starts.
    store = JobStore(tmp_path / "jobs")
    runner = JobRunner(store=store, ocr=_never, config=JobsConfig())  # type: ignore[arg-type]
    config, metrics, budget = AppConfig(), Metrics(), MemoryBudget(1 << 30)  # bodies are charged
    services = types.SimpleNamespace(
        config=config,
        metrics=metrics,
        budget=budget,
        ocr=types.SimpleNamespace(check_ready=lambda: None),
        jobs=types.SimpleNamespace(
            runner=runner, config=config.jobs, uploads=UploadSlots(config.jobs.max_uploads_per_key)
        ),
    )
    return cast(
        Runtime,
        types.SimpleNamespace(
            config=config, metrics=metrics, jobs=runner, endpoint_services=lambda: services
        ),
    )


async def _hang_up_mid_upload(
    runtime: Runtime, path: str, content_type: str, part: bytes
) -> list[Message]:
    """POST `part` of a 100 kB body, then disconnect; the messages the app sent back."""
    app = build_app(runtime, environ={})
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"localhost"),  # a Host the check answers with keys off (hosts.py)
            (b"content-type", content_type.encode()),
            (b"content-length", b"100000"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    received = 0

    async def receive() -> Message:
        nonlocal received
        received += 1
        if received == 1:
            return {"type": "http.request", "body": part, "more_body": True}
        return {"type": "http.disconnect"}  # as a server does, for every later call

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.parametrize(
    ("path", "content_type", "part"),
    [
        ("/ocr", "application/json", b'{"file": "iVBORw0KGgo'),
        ("/v1/ocr", "image/png", PNG_HEAD),
        ("/v1/ocr", MULTIPART, MULTIPART_HEAD),
        ("/v1/render", MULTIPART, MULTIPART_HEAD),
        ("/v1/jobs", MULTIPART, MULTIPART_HEAD),
    ],
    ids=["ocr", "v1-ocr-raw", "v1-ocr-multipart", "v1-render", "v1-jobs"],
)
def test_hang_up_mid_upload_is_499_at_info(
    path: str, content_type: str, part: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = _runtime(tmp_path)
    caplog.set_level(logging.INFO)
    try:
        sent = asyncio.run(_hang_up_mid_upload(runtime, path, content_type, part))
    finally:
        runtime.jobs.store.close()  # type: ignore[union-attr]
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 499
    samples = runtime.metrics.registry
    assert samples.get_sample_value("ocr_requests_total", {"endpoint": path, "status": "499"}) == 1
    assert (
        samples.get_sample_value("ocr_requests_total", {"endpoint": path, "status": "500"}) is None
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("went away during the upload" in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
