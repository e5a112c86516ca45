"""The deliveries of a job's hooks (webhooks, exports) in both job stores, SQLite and a real
PostgreSQL (the `store` fixture): each ended document and job queued exactly once, whoever ends
it; a claim holds a delivery from other processes until it lapses; attempts recorded with their
retry time; an export followed by its job's webhook; deliveries gone with their job."""

from __future__ import annotations

import json

from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store import JobStore
from serving.jobs.store.deliveries import Attempt, NewDelivery
from tests.clock import ManualClock

LEASES = {"webhook_lease_s": 30.0, "export_lease_s": 600.0}
CALLBACK = JobHooks(callback_url="https://hooks.example/ocr", events=("job", "document"))


def _create(store: JobStore, job_id: str, pages: tuple[int, ...], hooks: JobHooks | None) -> None:
    files = store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    documents = []
    for i, count in enumerate(pages):
        (files / str(i)).write_bytes(b"x")
        documents.append(
            Document(name=f"doc{i}", path=files / str(i), kind="pdf", pages=count, size_bytes=1)
        )
    store.create_job(job_id, documents, {}, owner="alice", hooks=hooks)


def _finish_all(store: JobStore) -> None:
    while (task := store.claim_next()) is not None:
        assert store.complete_page(task.job_id, task.seq, b'{"lines": []}')


def _claim_all(store: JobStore) -> list[str]:
    events = []
    while (delivery := store.claim_delivery(**LEASES)) is not None:
        events.append(delivery.event)
    return events


def test_each_ended_document_and_job_is_queued_once(store: JobStore) -> None:
    _create(store, "a", (1, 2), CALLBACK)
    assert store.enqueue_deliveries() == 0  # nothing ended yet
    first = store.claim_next()
    assert first is not None
    assert store.complete_page("a", first.seq, b'{"lines": []}')
    assert store.enqueue_deliveries() == 1  # document 0 (one page) ended
    assert store.enqueue_deliveries() == 0
    _finish_all(store)
    assert store.enqueue_deliveries() == 2  # document 1, then the job
    assert store.enqueue_deliveries() == 0
    deliveries = store.deliveries("a")
    assert [d.event for d in deliveries] == [
        "document.completed",
        "document.completed",
        "job.succeeded",
    ]
    assert len({d.id for d in deliveries}) == 3
    assert all(d.id.startswith("msg_") and "." not in d.id for d in deliveries)
    assert {d.status for d in deliveries} == {"pending"}
    assert store.get_job("a").hooks == CALLBACK


def test_the_events_carry_the_job_and_the_document(store: JobStore, clock: ManualClock) -> None:
    _create(store, "a", (2,), CALLBACK)
    task = store.claim_next()
    assert task is not None
    assert store.fail_page("a", task.seq, "invalid_input", "unreadable")
    _finish_all(store)
    store.enqueue_deliveries()
    bodies = {}
    while (delivery := store.claim_delivery(**LEASES)) is not None:
        bodies[delivery.event] = json.loads(delivery.body)
        assert delivery.owner == "alice"
        assert delivery.hooks.callback_url == CALLBACK.callback_url
    document, job = bodies["document.completed"], bodies["job.failed"]
    assert document["data"] == {
        "job_id": "a",
        "index": 0,
        "name": "doc0",
        "pages": 2,
        "pages_done": 1,
        "pages_failed": 1,
        "status": "failed",
        "href": "/v1/jobs/a/documents/0",
    }
    assert job["data"]["status"] == "failed"
    assert (job["data"]["pages_done"], job["data"]["pages_failed"]) == (1, 1)
    assert job["timestamp"].endswith("Z")


def test_a_cancelled_or_expired_job_is_told_and_its_unfinished_documents_are_not(
    store: JobStore, clock: ManualClock
) -> None:
    _create(store, "cancelled", (1, 1), CALLBACK)
    store.cancel_job("cancelled")
    _create(store, "expired", (1,), JobHooks(callback_url="https://hooks.example/ocr"))
    clock.now += 100
    assert store.expire_queued(50) == ["expired"]
    assert store.enqueue_deliveries() == 2
    assert sorted(_claim_all(store)) == ["job.cancelled", "job.failed"]


def test_a_job_without_hooks_or_with_job_events_only_queues_accordingly(store: JobStore) -> None:
    _create(store, "plain", (1,), None)
    _create(store, "end-only", (2,), JobHooks(callback_url="https://hooks.example/ocr"))
    _finish_all(store)
    assert store.enqueue_deliveries() == 1
    assert store.deliveries("plain") == []
    assert [d.event for d in store.deliveries("end-only")] == ["job.succeeded"]


def test_an_export_comes_first_and_its_end_queues_the_webhook(
    store: JobStore, clock: ManualClock
) -> None:
    hooks = JobHooks(callback_url="https://hooks.example/ocr", output="s3://bucket/out/")
    _create(store, "a", (1,), hooks)
    _finish_all(store)
    assert store.enqueue_deliveries() == 1
    export = store.claim_delivery(**LEASES)
    assert export is not None
    assert (export.kind, export.event) == ("export", "export")
    clock.now += 2
    then = NewDelivery(job_id="a", kind="webhook", event="job.succeeded", body="{}")
    done = Attempt(at=clock.now, ok=True, duration_ms=12.5)
    assert store.finish_attempt(export.id, done, next_at=None, then=then)
    assert not store.finish_attempt(export.id, done, next_at=None)  # over: once
    webhook = store.claim_delivery(**LEASES)
    assert webhook is not None
    assert (webhook.kind, webhook.event) == ("webhook", "job.succeeded")
    export_info = store.deliveries("a")[0]
    assert (export_info.status, export_info.attempts) == ("delivered", 1)
    assert export_info.log[0]["ok"] is True


def test_a_claim_holds_a_delivery_until_it_is_recorded_or_lapses(
    store: JobStore, clock: ManualClock
) -> None:
    _create(store, "a", (1,), JobHooks(callback_url="https://hooks.example/ocr"))
    _finish_all(store)
    store.enqueue_deliveries()
    first = store.claim_delivery(**LEASES)
    assert first is not None
    assert first.attempts == 1
    assert store.claim_delivery(**LEASES) is None  # held by the first claim
    assert store.next_delivery_at() == clock.now + LEASES["webhook_lease_s"]
    clock.now += LEASES["webhook_lease_s"] + 1  # its process died: the claim lapsed
    again = store.claim_delivery(**LEASES)
    assert again is not None
    assert (again.id, again.attempts) == (first.id, 2)
    failed = Attempt(at=clock.now, ok=False, status_code=503, error="HTTP 503")
    assert store.finish_attempt(again.id, failed, next_at=clock.now + 60)
    assert store.claim_delivery(**LEASES) is None  # not due yet
    assert store.next_delivery_at() == clock.now + 60
    (info,) = store.deliveries("a")
    assert (info.status, info.attempts, info.last_error) == ("pending", 2, "HTTP 503")
    assert info.to_json()["next_attempt_at"] is not None
    clock.now += 61
    third = store.claim_delivery(**LEASES)
    assert third is not None
    assert third.attempts == 3
    gone = Attempt(at=clock.now, ok=False, status_code=410, error="410 Gone")
    assert store.finish_attempt(third.id, gone, next_at=None)
    (info,) = store.deliveries("a")
    assert (info.status, info.finished_at) == ("failed", clock.now)
    assert [entry["status_code"] for entry in info.log] == [503, 410]
    assert store.next_delivery_at() is None


def test_deleting_a_job_deletes_its_deliveries(store: JobStore) -> None:
    _create(store, "a", (1,), JobHooks(callback_url="https://hooks.example/ocr"))
    _finish_all(store)
    store.enqueue_deliveries()
    store.delete_job("a")
    assert store.claim_delivery(**LEASES) is None
    assert store.next_delivery_at() is None
