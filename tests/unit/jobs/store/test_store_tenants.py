"""What one tenant (API key) may hold and take in the job stores, on SQLite and on a real
PostgreSQL (tests/postgres.py): stored quotas checked as a job is recorded, queued jobs that
expire, and job slots shared between tenants before jobs (issue 37, item 5)."""

from __future__ import annotations

import pytest

from serving.errors import StoredQuotaExceeded
from serving.jobs.files import Document
from serving.jobs.store import JobStore
from serving.jobs.store.types import StoredLimits, StoredUsage
from tests.clock import ManualClock


def _create(
    store: JobStore,
    job_id: str,
    pages: int = 1,
    owner: str | None = None,
    limits: StoredLimits | None = None,
    size_bytes: int = 10,
) -> None:
    files = store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    path = files / "0"
    path.write_bytes(b"%PDF-")
    document = Document(name="doc", path=path, kind="pdf", pages=pages, size_bytes=size_bytes)
    store.create_job(job_id, [document], {}, owner=owner, limits=limits)


def test_a_key_holds_at_most_its_jobs_bytes_and_pages(store: JobStore) -> None:
    two_jobs = StoredLimits(max_jobs=2)
    _create(store, "a1", owner="alice", limits=two_jobs)
    _create(store, "a2", owner="alice", limits=two_jobs)
    with pytest.raises(StoredQuotaExceeded, match=r"2 jobs of key alice.*limit is 2 \(max_jobs\)"):
        _create(store, "a3", owner="alice", limits=two_jobs)
    assert [job.id for job in store.list_jobs(owner="alice")] == ["a2", "a1"]  # a3 not recorded
    _create(store, "b1", owner="bob", limits=two_jobs)  # another key is not charged for alice's
    assert store.usage("alice") == StoredUsage(jobs=2, bytes=20, pages=2)

    pages = StoredLimits(max_pages=5)
    with pytest.raises(StoredQuotaExceeded, match="max_stored_pages"):
        _create(store, "a4", pages=4, owner="alice", limits=pages)
    _create(store, "a5", pages=3, owner="alice", limits=pages)
    with pytest.raises(StoredQuotaExceeded, match="max_stored_bytes"):
        _create(store, "a6", owner="alice", limits=StoredLimits(max_bytes=100), size_bytes=71)

    # Finished jobs count until deleted: deleting one makes room.
    store.delete_job("a1")
    _create(store, "a7", owner="alice", limits=StoredLimits(max_jobs=3))


def test_jobs_without_a_key_share_one_quota(store: JobStore) -> None:
    one = StoredLimits(max_jobs=1)
    _create(store, "x", limits=one)
    with pytest.raises(StoredQuotaExceeded, match="jobs submitted without a key"):
        _create(store, "y", limits=one)
    assert store.usage(None) == StoredUsage(jobs=1, bytes=10, pages=1)


def test_queued_jobs_expire_and_say_why(store: JobStore, clock: ManualClock) -> None:
    _create(store, "old", pages=2)
    _create(store, "stale", pages=2)
    task = store.claim_next()
    assert task is not None
    assert task.job_id == "old"  # running now: it does not expire
    clock.now += 60
    _create(store, "new", pages=1)
    clock.now += 50
    assert store.expire_queued(100.0) == ["stale"]  # queued 110 s; "new" only 50 s
    info = store.get_job("stale")
    assert (info.status, info.pages_failed, info.finished_at) == ("failed", 2, clock.now)
    assert {(p.code, p.page) for p in info.failed} == {("expired", 0), ("expired", 1)}
    assert "jobs.queued_expiry_s" in info.failed[0].message
    _, finished = store.finished_pages("stale")
    assert [p.seq for p in finished] == [0, 1]  # the results stream reports them
    assert store.get_job("old").status == "running"
    assert store.get_job("new").status == "queued"
    assert store.expire_queued(100.0) == []


def test_tenants_share_the_slots_before_their_jobs(store: JobStore, clock: ManualClock) -> None:
    """A key with three jobs gets no more of the slots than a key with one."""
    for n in range(3):
        _create(store, f"many{n}", pages=4, owner="many")
        clock.now += 1
    _create(store, "one", pages=4, owner="one")
    claimed = [store.claim_next() for _ in range(6)]
    owners = [store.get_job(t.job_id).owner for t in claimed if t is not None]
    assert owners == ["many", "one", "many", "one", "many", "one"]
    # Within a tenant, its jobs share its slots: each of many's three jobs got one page.
    assert sorted(t.job_id for t in claimed if t is not None and t.job_id != "one") == [
        "many0",
        "many1",
        "many2",
    ]
