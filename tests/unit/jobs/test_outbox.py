"""serving/jobs/outbox.py over a real SQLite store: a job's end is called back, a failing
receiver retried until it answers, an export refused by the store fails once and its job's
webhook says so, an unavailable store is tried again; /metrics counts each outcome. Receivers
are httpx mock transports (a real one: tests/e2e/test_job_callbacks.py)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from serving.config import AppConfig, WebhooksConfig
from serving.jobs.credentials import Credentials, CredentialStore
from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.outbox import Outbox
from serving.jobs.storage.errors import StorageDenied, StorageUnavailable
from serving.jobs.store.sqlite import SqliteJobStore
from serving.jobs.store.types import JobInfo
from serving.metrics import Metrics

pytestmark = pytest.mark.anyio

CALLBACK = "http://127.0.0.1:9/hook"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteJobStore]:
    store = SqliteJobStore(tmp_path / "jobs")
    store.open()
    yield store
    store.close()


def _outbox(
    tmp_path: Path, store: SqliteJobStore, receive: Callable[[httpx.Request], httpx.Response]
) -> tuple[Outbox, Metrics]:
    (tmp_path / "whsec").write_text("whsec_" + base64.b64encode(b"s" * 24).decode())
    config = AppConfig(
        webhooks=WebhooksConfig(
            allowed_hosts=("127.0.0.1",),
            allow_private_addresses=True,
            secret_file=str(tmp_path / "whsec"),
            retry_first_s=0.01,
            retry_max_interval_s=0.02,
        )
    )
    metrics = Metrics()
    outbox = Outbox(
        store=store,
        config=config,
        credentials=CredentialStore.load(config),
        metrics=metrics,
        jitter=lambda: 0.0,
        transport=httpx.MockTransport(receive),
    )
    return outbox, metrics


def _ended_job(store: SqliteJobStore, job_id: str, hooks: JobHooks) -> None:
    files = store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    (files / "0").write_bytes(b"x")
    document = Document(name="doc0", path=files / "0", kind="image", pages=1, size_bytes=1)
    store.create_job(job_id, [document], {}, hooks=hooks)
    task = store.claim_next()
    assert task is not None
    assert store.complete_page(job_id, task.seq, b'{"lines": []}')


async def _settled(store: SqliteJobStore, job_id: str, count: int) -> list[Any]:
    """The job's deliveries once `count` of them are over."""
    for _ in range(1000):
        deliveries = store.deliveries(job_id)
        if sum(d.status != "pending" for d in deliveries) >= count:
            return deliveries
        await asyncio.sleep(0.01)
    raise TimeoutError([d.to_json() for d in store.deliveries(job_id)])


def _count(metrics: Metrics, kind: str, outcome: str) -> float:
    value = metrics.deliveries.labels(kind=kind, outcome=outcome)._value.get()
    return float(value)


async def test_a_failing_receiver_is_retried_until_it_answers(
    tmp_path: Path, store: SqliteJobStore
) -> None:
    answers = [500, 503, 204]
    bodies: list[dict[str, Any]] = []

    def receive(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(answers.pop(0))

    outbox, metrics = _outbox(tmp_path, store, receive)
    _ended_job(store, "a", JobHooks(callback_url=CALLBACK))
    await outbox.start()
    try:
        outbox.wake()
        (delivery,) = await _settled(store, "a", 1)
    finally:
        await outbox.stop()
    assert (delivery.status, delivery.attempts) == ("delivered", 3)
    assert [entry["status_code"] for entry in delivery.log] == [500, 503, 204]
    assert [body["type"] for body in bodies] == ["job.succeeded"] * 3
    assert (_count(metrics, "webhook", "retried"), _count(metrics, "webhook", "delivered")) == (
        2.0,
        1.0,
    )


async def test_an_export_the_store_refuses_fails_once_and_its_webhook_says_so(
    tmp_path: Path, store: SqliteJobStore
) -> None:
    bodies: list[dict[str, Any]] = []

    def receive(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200)

    async def export(info: JobInfo, credentials: Credentials) -> dict[str, Any]:
        raise StorageDenied("s3://b/out/results.jsonl: access denied by the object store (403)")

    outbox, metrics = _outbox(tmp_path, store, receive)
    outbox.exporter = export
    _ended_job(store, "a", JobHooks(callback_url=CALLBACK, output="s3://bucket/out/"))
    await outbox.start()
    try:
        outbox.wake()
        export_info, webhook = await _settled(store, "a", 2)
    finally:
        await outbox.stop()
    assert (export_info.kind, export_info.status, export_info.attempts) == ("export", "failed", 1)
    assert "access denied" in export_info.last_error
    assert webhook.status == "delivered"
    (body,) = bodies
    assert body["data"]["output"] == {
        "status": "failed",
        "error": {
            "code": "storage_access_denied",
            "message": "s3://b/out/results.jsonl: access denied by the object store (403)",
        },
    }
    assert _count(metrics, "export", "failed") == 1.0


async def test_an_unavailable_store_is_tried_again(tmp_path: Path, store: SqliteJobStore) -> None:
    calls: list[int] = []

    async def export(info: JobInfo, credentials: Credentials) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise StorageUnavailable("s3://b/out/: ConnectTimeoutError")
        return {"location": "s3://bucket/out/", "count": 2, "objects": ["a", "b"]}

    outbox, metrics = _outbox(tmp_path, store, lambda _: httpx.Response(204))
    outbox.exporter = export
    _ended_job(store, "a", JobHooks(output="s3://bucket/out/"))  # no callback: export only
    await outbox.start()
    try:
        outbox.wake()
        (export_info,) = await _settled(store, "a", 1)
    finally:
        await outbox.stop()
    assert (export_info.status, export_info.attempts) == ("delivered", 2)
    assert (_count(metrics, "export", "retried"), _count(metrics, "export", "delivered")) == (
        1.0,
        1.0,
    )
