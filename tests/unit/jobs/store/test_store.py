"""The job stores' contract, on SQLite and on a real PostgreSQL (tests/postgres.py): lifecycle,
exactly-once commits, cancel, delete, retention, listing; then SQLite's own recovery, locking and
durability on power loss. Replicas sharing PostgreSQL: tests/integration/test_jobs_shared_store.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

from serving.jobs.files import Document
from serving.jobs.store import JobStore, postgres_schema, sqlite_schema
from serving.jobs.store.job_dirs import ORPHAN_MIN_AGE_S
from serving.jobs.store.postgres import PostgresJobStore
from serving.jobs.store.sqlite import SqliteJobStore
from serving.jobs.store.sqlite_schema import SCHEMA_VERSION, statements
from serving.jobs.store.types import MAX_CLAIMS, JobNotFound, JobStoreUnavailable
from tests.clock import ManualClock


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: ManualClock):
    store = SqliteJobStore(tmp_path / "jobs", clock=clock)
    store.open()
    yield store
    store.close()


def _create(
    store: JobStore, job_id: str, pages: tuple[int, ...] = (1, 3), owner: str | None = None
) -> None:
    files = store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    documents = []
    for i, count in enumerate(pages):
        path = files / str(i)
        path.write_bytes(b"%PDF-" if count > 1 else b"\x89PNG")
        kind = "pdf" if count > 1 else "image"
        documents.append(Document(name=f"doc{i}", path=path, kind=kind, pages=count, size_bytes=5))
    store.create_job(job_id, documents, {"det_thresh": 0.2}, owner=owner)


def _line(seq: int) -> bytes:
    return json.dumps({"seq": seq, "lines": [{"text": f"page {seq}"}]}).encode()


def test_lifecycle_queued_running_succeeded(store: JobStore, clock: ManualClock) -> None:
    _create(store, "a")
    info = store.get_job("a")
    assert (info.status, info.pages_total, info.pages_done) == ("queued", 4, 0)
    assert info.started_at is None
    assert [(f.name, f.kind, f.pages) for f in info.files] == [
        ("doc0", "image", 1),
        ("doc1", "pdf", 3),
    ]
    assert info.options == {"det_thresh": 0.2}
    clock.now += 5
    claimed = []
    while (task := store.claim_next()) is not None:
        claimed.append(task)
    assert [(t.file_index, t.page) for t in claimed] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert claimed[1].path == store.job_dir("a") / "files" / "1"
    assert claimed[1].kind == "pdf"
    assert claimed[1].options == {"det_thresh": 0.2}
    running = store.get_job("a")
    assert running.status == "running"
    assert running.started_at == clock.now
    for task in reversed(claimed):
        clock.now += 1
        assert store.complete_page("a", task.seq, _line(task.seq))
    done = store.get_job("a")
    assert (done.status, done.pages_done, done.pages_failed) == ("succeeded", 4, 0)
    assert done.finished_at == clock.now
    # Completion order is the order pages ended in; document order is by seq.
    _, pages = store.finished_pages("a")
    assert [p.seq for p in pages] == [3, 2, 1, 0]
    assert [p.order for p in pages] == [1, 2, 3, 4]
    _, in_order = store.finished_pages("a", from_seq=0)
    assert [p.seq for p in in_order] == [0, 1, 2, 3]
    assert store.read_result("a", 2) == _line(2)


def test_progress_reads_every_followed_job_at_once(store: JobStore) -> None:
    """What `serving.jobs.follow` reads for a replica's results streams: one call for all."""
    _create(store, "a", (2,))
    _create(store, "b", (1,))
    assert store.progress(["a", "b", "gone"]) == {"a": ("queued", 0), "b": ("queued", 0)}
    task = store.claim_next()
    assert task is not None
    store.complete_page(task.job_id, task.seq, _line(task.seq))
    assert store.progress(["a"])["a"] == ("running", 1)
    assert store.progress([]) == {}


def test_page_is_committed_exactly_once(store: JobStore) -> None:
    _create(store, "a", (2,))
    first = store.claim_next()
    assert first is not None
    assert store.complete_page("a", first.seq, _line(first.seq))
    assert not store.complete_page("a", first.seq, b"second result")
    assert not store.fail_page("a", first.seq, "internal", "late failure")
    assert store.read_result("a", first.seq) == _line(first.seq)
    info, pages = store.finished_pages("a")
    assert info.pages_done == 1
    assert [p.seq for p in pages] == [first.seq]
    # A page that is not running (pending, never claimed) cannot be committed either.
    assert not store.complete_page("a", 1, _line(1))
    assert store.get_job("a").pages_done == 1


def test_failed_pages_are_listed_and_fail_the_job(store: JobStore) -> None:
    _create(store, "a", (2,))
    one, two = store.claim_next(), store.claim_next()
    assert one is not None
    assert two is not None
    assert store.fail_page("a", one.seq, "invalid_input", "not a readable PDF")
    assert store.get_job("a").status == "running"
    assert store.complete_page("a", two.seq, _line(two.seq))
    info = store.get_job("a")
    assert (info.status, info.pages_done, info.pages_failed) == ("failed", 1, 1)
    assert [(p.file, p.page, p.code) for p in info.failed] == [("doc0", 0, "invalid_input")]
    _, pages = store.finished_pages("a")
    assert pages[0].error is not None
    assert pages[0].error.message == "not a readable PDF"
    assert pages[1].error is None


def test_reopen_resets_running_pages(tmp_path: Path, clock: ManualClock) -> None:
    store = SqliteJobStore(tmp_path / "jobs", clock=clock)
    store.open()
    _create(store, "a", (3,))
    first, second = store.claim_next(), store.claim_next()
    assert first is not None
    assert second is not None
    assert store.complete_page("a", first.seq, _line(first.seq))
    store.close()  # as after kill -9: the second page stays marked running

    again = SqliteJobStore(tmp_path / "jobs", clock=clock)
    assert again.open() == 1
    try:
        claimed = []
        while (task := again.claim_next()) is not None:
            claimed.append(task)
        assert [t.seq for t in claimed] == [1, 2]
        assert claimed[0].attempts == 2
        for task in claimed:
            assert again.complete_page("a", task.seq, _line(task.seq))
        info, pages = again.finished_pages("a")
        assert info.status == "succeeded"
        assert sorted(p.seq for p in pages) == [0, 1, 2]
    finally:
        again.close()


def test_a_page_that_kills_the_process_at_every_claim_is_failed(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Issue 37, item 6: pages left running went back to pending at every start, so a page that
    kills the whole process (out of memory, a crash) looped for ever; PostgreSQL's store fails
    it after `MAX_CLAIMS`, and so does SQLite's now, while the job goes on."""
    store = SqliteJobStore(tmp_path / "jobs", clock=clock)
    store.open()
    _create(store, "a", (2,))
    for claim in range(1, MAX_CLAIMS + 1):
        task = store.claim_next()
        assert task is not None
        assert (task.seq, task.attempts) == (0, claim)
        store.close()  # as after kill -9, the page still marked running
        store = SqliteJobStore(tmp_path / "jobs", clock=clock)
        assert store.open() == (1 if claim < MAX_CLAIMS else 0)
    try:
        info = store.get_job("a")
        assert info.pages_failed == 1
        assert info.failed[0].code == "page_abandoned"
        assert f"after {MAX_CLAIMS} claims" in info.failed[0].message
        task = store.claim_next()  # the job goes on with its other page
        assert task is not None
        assert task.seq == 1
        assert store.complete_page("a", task.seq, _line(task.seq))
        assert store.get_job("a").status == "failed"
    finally:
        store.close()


def test_cancel_stops_claims_and_commits(store: JobStore, clock: ManualClock) -> None:
    _create(store, "a", (3,))
    task = store.claim_next()
    assert task is not None
    clock.now += 2
    info = store.cancel_job("a")
    assert info.status == "cancelled"
    assert info.finished_at == clock.now
    assert store.claim_next() is None
    assert not store.complete_page("a", task.seq, _line(task.seq))
    assert not (store.job_dir("a") / "results" / f"{task.seq}.json").exists()
    # Cancelling a finished job leaves it as it is.
    assert store.cancel_job("a").finished_at == info.finished_at


def test_delete_removes_rows_and_files(store: JobStore) -> None:
    _create(store, "a", (2,))
    task = store.claim_next()
    assert task is not None
    store.delete_job("a")
    assert not store.job_dir("a").exists()
    with pytest.raises(JobNotFound):
        store.get_job("a")
    with pytest.raises(JobNotFound):
        store.delete_job("a")
    # The page in flight is not committed, and its directory is not recreated.
    assert not store.complete_page("a", task.seq, _line(task.seq))
    assert not store.job_dir("a").exists()


def test_retention_deletes_only_jobs_finished_long_ago(store: JobStore, clock: ManualClock) -> None:
    for job_id in ("old", "recent", "active"):
        _create(store, job_id, (1,))
    for job_id in ("old", "recent"):
        task = store.claim_next()
        assert task is not None
        assert task.job_id == job_id
        assert store.complete_page(job_id, task.seq, _line(0))
        clock.now += 100
    assert store.purge_expired(retention_s=150) == ["old"]
    assert not store.job_dir("old").exists()
    assert store.job_dir("recent").exists()
    assert {j.id for j in store.list_jobs()} == {"recent", "active"}
    clock.now += 1000
    assert store.purge_expired(retention_s=150) == ["recent"]
    assert [j.id for j in store.list_jobs()] == ["active"]


def test_listing_newest_first_and_by_status(store: JobStore, clock: ManualClock) -> None:
    for job_id in ("a", "b", "c"):
        _create(store, job_id, (1,))
        clock.now += 1
    store.cancel_job("b")
    assert [j.id for j in store.list_jobs()] == ["c", "b", "a"]
    assert [j.id for j in store.list_jobs(status="cancelled")] == ["b"]
    assert [j.id for j in store.list_jobs(limit=2)] == ["c", "b"]
    assert store.counts() == {
        "queued": 2,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 1,
    }
    listed = store.list_jobs()[0].to_json(detail=False)
    assert set(listed) == {
        "id",
        "status",
        "pages_total",
        "pages_done",
        "pages_failed",
        "created_at",
        "started_at",
        "finished_at",
        "owner",
    }
    assert listed["created_at"].endswith("+00:00")


def test_jobs_belong_to_the_key_that_submitted_them(store: JobStore, clock: ManualClock) -> None:
    for job_id, owner in (("a", "alice"), ("b", "bob"), ("c", None), ("d", "alice")):
        _create(store, job_id, (1,), owner=owner)
        clock.now += 1
    store.cancel_job("d")
    assert store.get_job("a").owner == "alice"
    assert store.get_job("c").owner is None
    assert [j.id for j in store.list_jobs(owner="alice")] == ["d", "a"]
    assert [j.id for j in store.list_jobs(owner="alice", status="queued")] == ["a"]
    assert [j.id for j in store.list_jobs(owner="bob")] == ["b"]
    assert store.list_jobs(owner="carol") == []
    assert [j.id for j in store.list_jobs()] == ["d", "c", "b", "a"]
    assert store.list_jobs(limit=1, owner="bob")[0].to_json()["owner"] == "bob"


def _version_1_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> JobStore:
    """A store made by a server of schema version 1 (before owners), holding job "old"."""
    insert = (
        "INSERT INTO {} (id, status, options, pages_total, created_at)"
        " VALUES ('old', 'queued', '{{}}', 1, 0)"
    )
    if kind == "sqlite":
        (tmp_path / "jobs").mkdir()
        db = sqlite3.connect(tmp_path / "jobs" / "jobs.sqlite3")
        db.executescript(sqlite_schema._MIGRATIONS[1])
        db.execute(insert.format("jobs"))
        db.execute("PRAGMA user_version = 1")
        db.commit()
        db.close()
        return SqliteJobStore(tmp_path / "jobs")
    url = request.getfixturevalue("postgres").database()
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements(postgres_schema._MIGRATIONS[1]):
            conn.execute(statement.encode())
        conn.execute("CREATE TABLE ocr_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO ocr_schema (version) VALUES (1)")
        conn.execute(insert.format("ocr_jobs").encode())
    return PostgresJobStore(url, uploads_dir=tmp_path / "jobs")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_version_1_store_gains_owners_and_keeps_its_jobs(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = _version_1_store(kind, tmp_path, request)
    store.open()
    try:
        old = store.get_job("old")
        assert (old.status, old.owner) == ("queued", None)
        _create(store, "new", (1,), owner="alice")
        assert [j.id for j in store.list_jobs(owner="alice")] == ["new"]
        assert {j.id for j in store.list_jobs()} == {"old", "new"}
    finally:
        store.close()


def test_purging_sweeps_only_old_directories_without_a_job(
    store: JobStore, clock: ManualClock
) -> None:
    """Either store, through `JobDirs.remove_stale_orphans`: an upload whose row was never
    committed goes once it is older than the cutoff; a job's directory and a fresh upload stay."""
    _create(store, "job", (1,))
    for name in ("stale", "fresh"):
        (store.job_dir(name) / "files").mkdir(parents=True)
    clock.now = time.time() + 3 * ORPHAN_MIN_AGE_S  # the cutoff falls between the two
    long_ago = clock.now - 2 * ORPHAN_MIN_AGE_S
    for name in ("stale", "job"):
        os.utime(store.job_dir(name), (long_ago, long_ago))
    os.utime(store.job_dir("fresh"), (clock.now, clock.now))
    assert store.purge_expired(retention_s=ORPHAN_MIN_AGE_S) == []  # no job has finished
    assert sorted(p.name for p in store.job_dir("job").parent.iterdir()) == ["fresh", "job"]


def test_orphan_upload_directories_are_swept(tmp_path: Path, clock: ManualClock) -> None:
    store = SqliteJobStore(tmp_path / "jobs", clock=clock)
    store.open()
    _create(store, "kept", (1,))
    (store.job_dir("orphan") / "files").mkdir(parents=True)
    store.close()
    store.open()
    try:
        assert store.job_dir("kept").exists()
        assert not store.job_dir("orphan").exists()
    finally:
        store.close()


def test_second_process_is_locked_out(tmp_path: Path) -> None:
    first = SqliteJobStore(tmp_path / "jobs")
    first.open()
    try:
        # flock locks belong to the open file description, so a second open in this process is
        # refused just as another server would be.
        with pytest.raises(JobStoreUnavailable, match="in use"):
            SqliteJobStore(tmp_path / "jobs").open()
    finally:
        first.close()
    second = SqliteJobStore(tmp_path / "jobs")
    second.open()
    second.close()


def test_schema_is_versioned_and_newer_is_refused(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs")
    store.open()
    store.close()
    db = sqlite3.connect(tmp_path / "jobs" / "jobs.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(JobStoreUnavailable, match="schema version"):
        SqliteJobStore(tmp_path / "jobs").open()
    assert not store.is_open


def test_store_is_created_only_on_open(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs")
    assert not store.exists
    assert not (tmp_path / "jobs").exists()
    with pytest.raises(JobStoreUnavailable):
        store.get_job("a")
    store.open()
    store.close()
    assert store.exists


# --- durability on power loss ------------------------------------------------------------------


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, list[str] | None]]:
    """Every `os.fsync`: the path synced, and the entries of a directory at that moment."""
    synced: list[tuple[Path, list[str] | None]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        synced.append((path, sorted(os.listdir(path)) if path.is_dir() else None))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_every_commit_syncs_the_wal(sqlite_store: SqliteJobStore) -> None:
    # NORMAL in WAL mode syncs only at checkpoints: a power cut could lose committed pages.
    db = sqlite_store._db
    assert db is not None
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_result_is_renamed_into_place_durably(
    sqlite_store: SqliteJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(sqlite_store, "a", (2,))
    synced = _record_fsyncs(monkeypatch)
    task = sqlite_store.claim_next()
    assert task is not None
    assert sqlite_store.complete_page("a", task.seq, _line(task.seq))
    job_dir = sqlite_store.job_dir("a").resolve()
    results = job_dir / "results"
    # The new results directory's entry, the result's bytes, then the rename, in that order.
    assert [path for path, _ in synced] == [job_dir, results / f"{task.seq}.tmp", results]
    assert synced[-1][1] == [f"{task.seq}.json"]


def test_uploads_reach_the_disk_before_the_job_row(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _record_fsyncs(monkeypatch)
    _create(store, "a", (1, 3))
    job_dir = store.job_dir("a").resolve()
    files = job_dir / "files"
    assert [path for path, _ in synced] == [
        files / "0",
        files / "1",
        files,
        job_dir,
        job_dir.parent,
    ]


def test_jobs_share_the_claims_fewest_running_first(store: JobStore) -> None:
    """A job queued behind a long one starts at once: each claim takes a page of the active job
    with the fewest pages running, then the oldest."""
    _create(store, "long", pages=(4,))
    _create(store, "short", pages=(1, 1))
    claimed = [store.claim_next() for _ in range(4)]
    assert [(t.job_id, t.seq) for t in claimed if t is not None] == [
        ("long", 0),
        ("short", 0),
        ("long", 1),
        ("short", 1),
    ]
    # The short job has no page left: the long one takes the rest.
    assert store.complete_page("short", 0, _line(0))
    next_task = store.claim_next()
    assert next_task is not None
    assert (next_task.job_id, next_task.seq) == ("long", 2)
