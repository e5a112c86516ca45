"""Replicas sharing one PostgreSQL job store (a real server, tests/postgres.py): any replica answers
for any job, claims never overlap while leases live, a lapsed lease is taken over, and each page
is committed exactly once, also under concurrent claimers. Leases follow the database's clock:
tests move it for the leases (`_later`), and a replica's own clock changes nothing about them."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import cast

import numpy as np
import psycopg
import pytest

from pipelines.types import PageResult, TextLine
from serving.config import JobsConfig
from serving.jobs import runner as runner_module
from serving.jobs.files import Document
from serving.jobs.runner import JobRunner
from serving.jobs.store.postgres import MAX_CLAIMS, PostgresJobStore
from serving.jobs.store.types import JobStoreUnavailable, PageTask
from tests.clock import ManualClock
from tests.postgres import PostgresServer

LEASE_S = 300.0
"""Long: the database's clock runs on between a test's steps, which count in tenths of it."""


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    return postgres.database()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def replicas(
    url: str, tmp_path: Path, clock: ManualClock
) -> Iterator[tuple[PostgresJobStore, ...]]:
    """Two stores on one database and one uploads directory, as two replicas have them."""
    stores = tuple(
        PostgresJobStore(url, uploads_dir=tmp_path, lease_s=LEASE_S, clock=clock, owner=name)
        for name in ("replica-a", "replica-b")
    )
    for store in stores:
        store.open()
    yield stores
    for store in stores:
        store.close()


def _create(store: PostgresJobStore, job_id: str, pages: int) -> None:
    files = store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    (files / "0").write_bytes(b"%PDF-")
    document = Document(name="doc.pdf", path=files / "0", kind="pdf", pages=pages, size_bytes=5)
    store.create_job(job_id, [document], {})


def _line(seq: int) -> bytes:
    return json.dumps({"seq": seq}).encode()


def _later(url: str, clock: ManualClock, seconds: float) -> None:
    """`seconds` pass: on the replicas' clock (the jobs' timestamps) and, for the leases, on the
    database's (each lease `seconds` nearer its end, as if its `now()` had moved on)."""
    clock.now += seconds
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE ocr_pages SET lease_expires_at = lease_expires_at - %s"
            " WHERE lease_expires_at IS NOT NULL",
            (seconds,),
        )


def _db_now(url: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM now())::double precision").fetchone()
    assert row is not None
    return float(row[0])


def _lease_expiry(url: str, job_id: str, seq: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT lease_expires_at FROM ocr_pages WHERE job_id = %s AND seq = %s", (job_id, seq)
        ).fetchone()
    assert row is not None
    return float(row[0])


def test_any_replica_answers_for_a_job_and_claims_never_overlap(replicas) -> None:
    a, b = replicas
    _create(a, "j", 4)
    assert b.get_job("j").pages_total == 4
    assert [j.id for j in b.list_jobs()] == ["j"]
    claims = [a.claim_next(), b.claim_next(), a.claim_next(), b.claim_next()]
    assert [t.seq for t in claims if t is not None] == [0, 1, 2, 3]
    assert a.claim_next() is None
    assert b.claim_next() is None
    # Each commits its own pages only; the other's are refused while their lease lives.
    assert not a.complete_page("j", 1, _line(1))
    assert b.complete_page("j", 1, _line(1))
    for seq, store in ((0, a), (2, a), (3, b)):
        assert store.complete_page("j", seq, _line(seq))
    # A page just committed is not "lost" to its committer (its task is ending), but is to others.
    assert a.renew_leases([("j", 0), ("j", 2)]) == set()
    assert b.renew_leases([("j", 0)]) == {("j", 0)}
    info, pages = a.finished_pages("j")
    assert info.status == "succeeded"
    assert [p.order for p in pages] == [1, 2, 3, 4]
    assert [a.read_result("j", seq) for seq in range(4)] == [_line(s) for s in range(4)]


def test_a_lapsed_lease_is_taken_over_and_committed_once(
    replicas, url: str, clock: ManualClock
) -> None:
    a, b = replicas
    _create(a, "j", 2)
    held = a.claim_next()
    assert held is not None
    assert held.seq == 0
    _later(url, clock, LEASE_S / 2)
    assert a.renew_leases([("j", 0)]) == set()  # renewed: good for another LEASE_S from here
    _later(url, clock, LEASE_S * 0.9)
    taken = b.claim_next()
    assert taken is not None
    assert taken.seq == 1  # page 0's renewed lease still lives
    _later(url, clock, LEASE_S)  # replica a stops renewing (killed): its lease lapses
    again = b.claim_next()
    assert again is not None
    assert (again.seq, again.attempts) == (0, 2)
    assert a.renew_leases([("j", 0)]) == {("j", 0)}  # a learns it lost the page
    assert not a.complete_page("j", 0, b"late result of the replica that lost its lease")
    assert not a.fail_page("j", 0, "internal", "late")
    assert not a.release_page("j", 0)
    assert b.complete_page("j", 0, _line(0))
    assert b.complete_page("j", 1, _line(1))
    info, pages = b.finished_pages("j")
    assert (info.status, info.pages_done) == ("succeeded", 2)
    assert sorted(p.seq for p in pages) == [0, 1]
    assert b.read_result("j", 0) == _line(0)


def test_a_replica_restarting_gives_back_lapsed_pages_only(
    replicas, url: str, tmp_path: Path, clock: ManualClock
) -> None:
    a, b = replicas
    _create(a, "j", 3)
    assert a.claim_next() is not None
    _later(url, clock, LEASE_S / 2)
    assert b.claim_next() is not None
    _later(url, clock, LEASE_S * 0.6)  # a's lease lapsed, b's lives
    restarted = PostgresJobStore(url, uploads_dir=tmp_path, clock=clock, owner="replica-a2")
    assert restarted.open() == 1
    try:
        task = restarted.claim_next()
        assert task is not None
        assert (task.seq, task.attempts) == (0, 2)
    finally:
        restarted.close()


def test_leases_follow_the_databases_clock_not_the_replicas(url: str, tmp_path: Path) -> None:
    """A replica whose clock is an hour ahead takes no live lease (it took every lease of a replica
    an hour behind when leases were timed by the replicas' clocks), and one an hour behind keeps
    its own lease for `lease_s` of the database's time."""
    ahead, behind = (
        PostgresJobStore(url, uploads_dir=tmp_path, lease_s=LEASE_S, clock=skewed, owner=name)
        for name, skewed in (
            ("ahead", lambda: time.time() + 3600),
            ("behind", lambda: time.time() - 3600),
        )
    )
    ahead.open()
    behind.open()
    try:
        _create(behind, "j", 2)
        before = _db_now(url)
        held = behind.claim_next()
        after = _db_now(url)
        assert held is not None
        assert held.seq == 0
        assert before + LEASE_S <= _lease_expiry(url, "j", 0) <= after + LEASE_S
        taken = ahead.claim_next()
        assert taken is not None
        assert (taken.seq, taken.attempts) == (1, 1)  # not page 0, whose lease lives
        assert ahead.claim_next() is None
        renewed_from = _db_now(url)
        assert behind.renew_leases([("j", 0)]) == set()
        assert _lease_expiry(url, "j", 0) >= renewed_from + LEASE_S
        assert not ahead.complete_page("j", 0, _line(0))
        assert behind.complete_page("j", 0, _line(0))
        assert ahead.complete_page("j", 1, _line(1))
        assert ahead.get_job("j").status == "succeeded"
    finally:
        ahead.close()
        behind.close()


def test_cancel_on_one_replica_stops_the_others_commits(replicas) -> None:
    a, b = replicas
    _create(a, "j", 2)
    task = a.claim_next()
    assert task is not None
    assert b.cancel_job("j").status == "cancelled"
    assert a.renew_leases([("j", task.seq)]) == {("j", task.seq)}
    assert not a.complete_page("j", task.seq, _line(task.seq))
    assert a.claim_next() is None
    assert a.get_job("j").pages_done == 0


def test_concurrent_replicas_commit_every_page_exactly_once(url: str, tmp_path: Path) -> None:
    """Four replicas, each claiming and committing as fast as it can, on the real clock."""
    stores = [
        PostgresJobStore(url, uploads_dir=tmp_path, owner=f"r{i}", lease_s=LEASE_S)
        for i in range(4)
    ]
    for store in stores:
        store.open()
    _create(stores[0], "j", 60)
    committed: dict[str, list[int]] = {store.owner: [] for store in stores}

    def work(store: PostgresJobStore) -> None:
        while (task := store.claim_next()) is not None:
            if store.complete_page(task.job_id, task.seq, _line(task.seq)):
                committed[store.owner].append(task.seq)

    threads = [threading.Thread(target=work, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        seqs = sorted(seq for done in committed.values() for seq in done)
        assert seqs == list(range(60))
        info, pages = stores[1].finished_pages("j")
        assert (info.status, info.pages_done) == ("succeeded", 60)
        assert sorted(p.order for p in pages) == list(range(1, 61))
        assert sum(1 for done in committed.values() if done) >= 2  # they really shared the work
    finally:
        for store in stores:
            store.close()


def test_a_newer_schema_is_refused(url: str, tmp_path: Path) -> None:
    store = PostgresJobStore(url, uploads_dir=tmp_path)
    store.open()
    store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE ocr_schema SET version = version + 1")
    with pytest.raises(JobStoreUnavailable, match="schema version"):
        PostgresJobStore(url, uploads_dir=tmp_path).open()
    assert not store.is_open


def test_an_unreachable_database_answers_503(tmp_path: Path) -> None:
    missing = f"postgresql://nobody@/none?host={tmp_path}"  # no server listens there
    store = PostgresJobStore(missing, uploads_dir=tmp_path)
    with pytest.raises(JobStoreUnavailable, match="unreachable") as caught:
        store.open()
    assert caught.value.http_status == 503
    assert not store.is_open
    # What clients are told names no host, port or user (issue 49): libpq's message did.
    on_tcp = PostgresJobStore("postgresql://someuser@127.0.0.1:1/db", uploads_dir=tmp_path)
    with pytest.raises(JobStoreUnavailable) as told:
        on_tcp.open()
    for secret in ("127.0.0.1", "someuser", "port 1", str(tmp_path), "nobody"):
        assert secret not in told.value.message
        assert secret not in caught.value.message


# --- two job runners (the replicas' feed, lease renewal and polling) on one store -------------


class HeldOcr:
    """Holds every page until cancelled; notes the pages it started and the ones cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled: list[int] = []

    async def __call__(self, task: PageTask) -> PageResult:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(task.seq)
            raise
        raise AssertionError("unreachable")


async def quick_ocr(task: PageTask) -> PageResult:
    line = TextLine(text=f"page {task.seq}", score=0.9, poly=np.zeros((4, 2), np.int16))
    return PageResult(width=10, height=20, lines=[line])


@pytest.mark.anyio
async def test_runners_take_over_a_stalled_replicas_page_which_then_drops_it(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease_s = 0.6
    config = JobsConfig(
        data_dir=str(tmp_path),
        store=url,
        lease_s=lease_s,
        poll_interval_s=0.05,
        max_inflight_pages=1,
    )

    def runner(owner: str, ocr: Callable[[PageTask], Awaitable[PageResult]]) -> JobRunner:
        store = PostgresJobStore(
            url, uploads_dir=tmp_path, lease_s=lease_s, poll_interval_s=0.05, owner=owner
        )
        return JobRunner(store=store, ocr=ocr, config=config)

    held = HeldOcr()
    a = runner("replica-a", held)
    await a.start()
    b = runner("replica-b", quick_ocr)
    try:
        _create(cast(PostgresJobStore, a.store), "j", 3)
        await asyncio.wait_for(held.started.wait(), 10)
        # Replica a stalls (a long pause, a network partition): its renewals stop reaching the
        # database, so its lease on page 0 lapses while it still works on the page.
        stalled: list[int] = []
        monkeypatch.setattr(a.store, "renew_leases", lambda pages: stalled.append(1) or set())
        await b.start()
        for _ in range(200):
            info = await b.get("j")
            if info.finished:
                break
            await asyncio.sleep(0.05)
        assert (info.status, info.pages_done) == ("succeeded", 3)
        assert stalled  # a went on trying to renew meanwhile
        assert held.cancelled == []
        # Back in touch, a learns it lost page 0 and drops it.
        monkeypatch.undo()
        for _ in range(100):
            if held.cancelled:
                break
            await asyncio.sleep(0.05)
        assert held.cancelled == [0]
        _, pages = await asyncio.to_thread(b.store.finished_pages, "j")
        assert sorted(p.seq for p in pages) == [0, 1, 2]
    finally:
        await a.stop()
        await b.stop()


def test_a_dropped_connection_answers_503_once_then_reconnects(replicas, url: str) -> None:
    a, _b = replicas
    _create(a, "j", 1)
    with psycopg.connect(url, autocommit=True) as admin:  # as a database restart would
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND datname = current_database()"
        )
    with pytest.raises(JobStoreUnavailable, match="unreachable"):
        a.get_job("j")
    assert a.get_job("j").pages_total == 1


@pytest.mark.anyio
async def test_a_runner_started_before_its_database_feeds_once_it_is_up(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"late_{uuid.uuid4().hex[:8]}"
    url = postgres.url(name)  # no such database yet: connecting fails as with a server down
    monkeypatch.setattr(runner_module, "STORE_RETRY_S", 0.1)
    config = JobsConfig(data_dir=str(tmp_path), store=url, poll_interval_s=0.05)
    store = PostgresJobStore(url, uploads_dir=tmp_path, poll_interval_s=0.05)
    runner = JobRunner(store=store, ocr=quick_ocr, config=config)
    try:
        await runner.start()  # logs that the store is unreachable, and keeps trying
        assert not store.is_open
        with psycopg.connect(postgres.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}".encode())
        other = PostgresJobStore(url, uploads_dir=tmp_path)  # another replica
        other.open()
        _create(other, "j", 2)
        for _ in range(200):
            if (info := other.get_job("j")).finished:
                break
            await asyncio.sleep(0.05)
        assert (info.status, info.pages_done) == ("succeeded", 2)
        other.close()
    finally:
        await runner.stop()


def test_only_old_upload_directories_without_a_job_are_swept(replicas, clock: ManualClock) -> None:
    """Another replica may be mid-upload in a directory that has no job yet: only old ones go."""
    a, b = replicas
    _create(a, "kept", 1)
    for name in ("abandoned", "uploading"):
        (a.job_dir(name) / "files").mkdir(parents=True)
    long_ago = clock.now - 10 * 86400
    for name in ("abandoned", "kept"):
        os.utime(a.job_dir(name), (long_ago, long_ago))
    assert b.purge_expired(retention_s=86400) == []
    assert not a.job_dir("abandoned").exists()
    assert a.job_dir("uploading").exists()
    assert a.job_dir("kept").exists()


def test_a_url_libpq_cannot_read_answers_503(tmp_path: Path) -> None:
    store = PostgresJobStore("postgresql://ocr@/db?no_such_option=1", uploads_dir=tmp_path)
    with pytest.raises(JobStoreUnavailable, match="unreachable"):
        store.open()


def test_a_page_whose_every_replica_dies_is_failed_not_passed_on_for_ever(
    replicas, url: str, clock: ManualClock
) -> None:
    """A page that kills whoever runs it (say, memory) must not take every replica down in turn."""
    a, b = replicas
    _create(a, "j", 2)
    for claim in range(MAX_CLAIMS):
        store = (a, b)[claim % 2]
        task = store.claim_next()
        assert task is not None
        assert (task.seq, task.attempts) == (0, claim + 1)
        _later(url, clock, LEASE_S + 1)  # its replica dies with it
    survivor = b.claim_next()
    assert survivor is not None
    assert survivor.seq == 1  # page 0 was failed, not claimed a sixth time
    assert b.complete_page("j", 1, _line(1))
    info = a.get_job("j")
    assert (info.status, info.pages_done, info.pages_failed) == ("failed", 1, 1)
    assert [(p.page, p.code) for p in info.failed] == [(0, "page_abandoned")]
    assert f"after {MAX_CLAIMS} claims" in info.failed[0].message
