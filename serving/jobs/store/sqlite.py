"""The embedded job store (the default): jobs, files and pages in SQLite (WAL), for one server.

Layout under the data directory: `jobs.sqlite3` (schema version in `PRAGMA user_version`), `lock`
(held with `flock` while a process has the store open, so two servers never share it), and per job
`jobs/<id>/files/<n>` (the uploaded documents) and `jobs/<id>/results/<seq>.json` (one page's
result, the exact NDJSON line). Every page is its own unit of work: `claim_next` marks it running,
and `complete_page` writes its result file atomically and marks it done in one transaction, only if
it is still running, so a page is committed at most once; `open` sets pages left running by a
killed process back to pending, so each page is committed exactly once, unless it was claimed
`MAX_CLAIMS` times: a page that kills the process each time it runs is failed (`page_abandoned`).
Commits survive power loss: SQLite syncs its WAL on every commit (`synchronous = FULL`), and
uploads, result files and the directory entries naming them are fsynced before the rows that
point at them are committed.

Methods are synchronous and serialised by a lock; async callers run them with `asyncio.to_thread`.
Timestamps are wall-clock seconds (`time.time()`), since they must mean the same after a restart.
It implements `serving.jobs.store.JobStore`; replicas share `serving.jobs.store.postgres` instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store import deliveries
from serving.jobs.store.deliveries import DeliveryStore
from serving.jobs.store.durable import fsync_path, write_atomic
from serving.jobs.store.job_dirs import ORPHAN_MIN_AGE_S, JobDirs
from serving.jobs.store.queries import (
    SQLITE,
    count_jobs,
    expire_queued,
    expired_jobs,
    insert_job,
    job_progress,
    read_finished,
    read_job,
    set_cancelled,
    stored_usage,
)
from serving.jobs.store.rows import job_info, page_task
from serving.jobs.store.sqlite_schema import migrate
from serving.jobs.store.types import (
    MAX_CLAIMS,
    FinishedPage,
    JobInfo,
    JobNotFound,
    JobStatus,
    JobStoreUnavailable,
    PageTask,
    StoredLimits,
    StoredUsage,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SqliteJobStore(JobDirs, DeliveryStore):
    """Jobs in SQLite under `data_dir`; see the module docstring for the layout and guarantees."""

    poll_interval_s: float | None = None
    """Nothing changes the store behind this process's back: no need to look again."""
    lease_s: float | None = None
    """This process holds the store (`flock`), so its claims never lapse."""

    def __init__(self, data_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(data_dir)
        self.data_dir = data_dir
        self._clock = clock
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._dialect = SQLITE

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """Where the store is, for logs."""
        return str(self.data_dir)

    @property
    def exists(self) -> bool:
        """Whether a store was ever created here (there may be jobs to resume)."""
        return (self.data_dir / "jobs.sqlite3").is_file()

    @property
    def is_open(self) -> bool:
        """Whether `open` succeeded and `close` was not called since."""
        return self._db is not None

    def open(self) -> int:
        """Create or open the store, take its lock, and reset pages left running.

        Returns the number of pages set back to pending.

        Raises:
            JobStoreUnavailable: another process holds the store, or it cannot be read.
        """
        with self._lock:
            if self._db is not None:
                return 0
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True)
                self._lock_fd = _take_lock(self.data_dir / "lock")
                db = sqlite3.connect(
                    self.data_dir / "jobs.sqlite3", isolation_level=None, check_same_thread=False
                )
            except OSError as err:
                self._release_lock()
                raise JobStoreUnavailable(f"Cannot open the job store: {err}") from err
            try:
                db.row_factory = sqlite3.Row
                db.execute("PRAGMA journal_mode = WAL")
                # FULL: every commit fsyncs the WAL, so a committed page survives power loss;
                # NORMAL syncs only at checkpoints and may lose the last commits (the page would
                # then run again, its result file already written).
                db.execute("PRAGMA synchronous = FULL")
                db.execute("PRAGMA busy_timeout = 5000")
                migrate(db)
                with _transaction(db):
                    self._fail_abandoned(db)
                    reset = db.execute(
                        "UPDATE pages SET status = 'pending' WHERE status = 'running' AND job_id IN"
                        " (SELECT id FROM jobs WHERE status IN ('queued', 'running'))"
                    ).rowcount
                    # Deliveries a killed process was sending: this process holds the store.
                    db.execute(
                        "UPDATE deliveries SET claimed_until = NULL WHERE status = 'pending'"
                    )
                self._db = db
                self._sweep_orphans()
            except (sqlite3.Error, JobStoreUnavailable) as err:
                db.close()
                self._release_lock()
                if isinstance(err, JobStoreUnavailable):
                    raise
                raise JobStoreUnavailable(f"Cannot open the job store: {err}") from err
            return reset

    def close(self) -> None:
        """Close the database and release the lock (waits for a call in progress)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            self._release_lock()

    # --- jobs ---------------------------------------------------------------------------------

    def create_job(
        self,
        job_id: str,
        documents: Sequence[Document],
        options: dict[str, Any],
        *,
        owner: str | None = None,
        limits: StoredLimits | None = None,
        hooks: JobHooks | None = None,
    ) -> JobInfo:
        """Record a job whose documents already sit under `job_dir(job_id) / "files"`, within
        its owner's `limits`, with its `hooks` (callback, export).

        The documents and the directories holding them reach the disk before the job's row.

        Raises:
            StoredQuotaExceeded: the job would take its owner past `limits`.
        """
        self.sync_uploads(job_id, documents)
        now = self._clock()
        with self._locked() as db, _transaction(db):
            return insert_job(
                db,
                SQLITE,
                job_id,
                documents,
                options,
                now=now,
                owner=owner,
                limits=limits,
                hooks=hooks,
                outputs=self.outputs_bytes,
            )

    def expire_queued(self, max_queued_s: float) -> list[str]:
        """Fail the jobs still queued `max_queued_s` after they were created; returns their ids."""
        now = self._clock()
        with self._locked() as db, _transaction(db):
            return expire_queued(db, SQLITE, created_before=now - max_queued_s, now=now)

    def usage(self, owner: str | None) -> StoredUsage:
        """What `owner` holds in the store (None: jobs submitted without a key)."""
        with self._locked() as db:
            return stored_usage(db, SQLITE, owner, self.outputs_bytes)

    def get_job(self, job_id: str) -> JobInfo:
        """The job's state, with its files and failed pages.

        Raises:
            JobNotFound: no such job.
        """
        with self._locked() as db:
            return read_job(db, SQLITE, job_id, detail=True)

    def list_jobs(
        self, *, status: JobStatus | None = None, limit: int = 100, owner: str | None = None
    ) -> list[JobInfo]:
        """Jobs, newest first; with `owner`, only that key's."""
        with self._locked() as db:
            rows = db.execute(
                "SELECT * FROM jobs WHERE (?1 IS NULL OR status = ?1)"
                " AND (?2 IS NULL OR owner = ?2) ORDER BY created_at DESC, rowid DESC LIMIT ?3",
                (status, owner, limit),
            ).fetchall()
            return [job_info(row) for row in rows]

    def counts(self) -> dict[str, int]:
        """Jobs per status (every status present, zero where none)."""
        with self._locked() as db:
            return count_jobs(db, SQLITE)

    def cancel_job(self, job_id: str) -> JobInfo:
        """Mark a queued or running job cancelled; a finished job is left as it is.

        Raises:
            JobNotFound: no such job.
        """
        now = self._clock()
        with self._locked() as db, _transaction(db):
            return set_cancelled(db, SQLITE, job_id, now=now)

    def delete_job(self, job_id: str) -> None:
        """Delete a job's rows, uploads and results (a page being OCR'd is not committed).

        Raises:
            JobNotFound: no such job.
        """
        with self._locked() as db:
            with _transaction(db):
                if db.execute("DELETE FROM jobs WHERE id = ?", (job_id,)).rowcount == 0:
                    raise JobNotFound(f"No job {job_id}")
                db.execute("DELETE FROM files WHERE job_id = ?", (job_id,))
                db.execute("DELETE FROM pages WHERE job_id = ?", (job_id,))
                deliveries.delete_of_job(db, SQLITE, job_id)
            # Under the lock: a concurrent `complete_page` sees no row and writes nothing.
            self.discard(job_id)

    def purge_expired(self, retention_s: float) -> list[str]:
        """Delete jobs that finished more than `retention_s` ago; returns their ids."""
        cutoff = self._clock() - retention_s
        with self._locked() as db:
            ids = expired_jobs(db, SQLITE, finished_before=cutoff)
        for job_id in ids:
            with contextlib.suppress(JobNotFound):
                self.delete_job(job_id)
        self._sweep_orphans(older_than=min(cutoff, self._clock() - ORPHAN_MIN_AGE_S))
        return ids

    # --- pages --------------------------------------------------------------------------------

    def claim_next(self) -> PageTask | None:
        """Mark the next pending page running: of the tenant (owner) with the fewest pages
        running, then its active job with the fewest, then the oldest (tenants share the runner's
        slots, then their jobs do); None when there is none."""
        now = self._clock()
        with self._locked() as db, _transaction(db):
            for job in db.execute(
                "SELECT j.id, j.options FROM jobs j WHERE j.status IN ('queued', 'running')"
                " ORDER BY (SELECT COUNT(*) FROM pages r JOIN jobs o ON o.id = r.job_id"
                "  WHERE o.owner IS j.owner AND o.status IN ('queued', 'running')"
                "  AND r.status = 'running'),"
                " (SELECT COUNT(*) FROM pages r WHERE r.job_id = j.id AND r.status = 'running'),"
                " j.rowid"
            ).fetchall():
                row = db.execute(
                    "SELECT p.job_id, p.seq, p.file_idx, p.page, p.attempts,"
                    " f.name, f.stored_as, f.kind"
                    " FROM pages p JOIN files f ON f.job_id = p.job_id AND f.idx = p.file_idx"
                    " WHERE p.job_id = ? AND p.status = 'pending' ORDER BY p.seq LIMIT 1",
                    (job["id"],),
                ).fetchone()
                if row is None:
                    continue
                db.execute(
                    "UPDATE pages SET status = 'running', attempts = attempts + 1"
                    " WHERE job_id = ? AND seq = ?",
                    (job["id"], row["seq"]),
                )
                db.execute(
                    "UPDATE jobs SET status = 'running', started_at = COALESCE(started_at, ?)"
                    " WHERE id = ?",
                    (now, job["id"]),
                )
                return page_task(
                    row,
                    row,
                    options=job["options"],
                    attempts=row["attempts"] + 1,
                    job_dir=self.job_dir,
                )
        return None

    def complete_page(self, job_id: str, seq: int, line: bytes) -> bool:
        """Commit a page's result: the file written atomically, the row updated, once.

        Returns False (and writes nothing) when the page is no longer running in a running job:
        the job was cancelled or deleted, or the page was already committed.
        """
        with self._locked() as db, _transaction(db):
            if not self._is_running(db, job_id, seq):
                return False
            results = self.job_dir(job_id) / "results"
            if not results.is_dir():
                results.mkdir(exist_ok=True)
                fsync_path(results.parent)
            write_atomic(results / f"{seq}.json", line)
            self._finish_page(db, job_id, seq, "done", None, None)
            return True

    def fail_page(self, job_id: str, seq: int, code: str, message: str) -> bool:
        """Record that a page failed; False when it was no longer running in a running job."""
        with self._locked() as db, _transaction(db):
            if not self._is_running(db, job_id, seq):
                return False
            self._finish_page(db, job_id, seq, "failed", code, message)
            return True

    def release_page(self, job_id: str, seq: int, *, refund: bool = False) -> bool:
        """Put a running page back to pending (to try again later, or at shutdown).

        `refund` takes back the attempt its claim counted: the page never started (overload).
        """
        with self._locked() as db, _transaction(db):
            return (
                db.execute(
                    "UPDATE pages SET status = 'pending', attempts = attempts - ?"
                    " WHERE job_id = ? AND seq = ? AND status = 'running'",
                    (int(refund), job_id, seq),
                ).rowcount
                == 1
            )

    def renew_leases(self, pages: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Nothing to renew: this process holds the store, so its claims never lapse."""
        return set()

    def finished_pages(
        self, job_id: str, *, after_order: int = 0, from_seq: int | None = None
    ) -> tuple[JobInfo, list[FinishedPage]]:
        """The job and its finished pages: after `after_order` in completion order, or (with
        `from_seq`) the finished pages from `from_seq` on in document order, stopping at the
        first page not finished yet. Both are read at one instant.

        Raises:
            JobNotFound: no such job.
        """
        with self._locked() as db:
            return read_finished(db, SQLITE, job_id, after_order=after_order, from_seq=from_seq)

    def progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each job's status and finished pages, for those of `job_ids` that exist."""
        with self._locked() as db:
            return job_progress(db, SQLITE, job_ids)

    def read_result(self, job_id: str, seq: int) -> bytes:
        """A done page's result line.

        Raises:
            JobNotFound: the job (and so its results) was deleted.
        """
        try:
            return (self.job_dir(job_id) / "results" / f"{seq}.json").read_bytes()
        except FileNotFoundError as err:
            raise JobNotFound(f"No job {job_id}") from err

    # --- internals ----------------------------------------------------------------------------

    def _tx(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._locked() as db, _transaction(db):
            return work(db)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db is None:
                raise JobStoreUnavailable("The job store is not open")
            yield self._db

    @staticmethod
    def _is_running(db: sqlite3.Connection, job_id: str, seq: int) -> bool:
        row = db.execute(
            "SELECT p.status, j.status FROM pages p JOIN jobs j ON j.id = p.job_id"
            " WHERE p.job_id = ? AND p.seq = ?",
            (job_id, seq),
        ).fetchone()
        return row is not None and tuple(row) == ("running", "running")

    def _fail_abandoned(self, db: sqlite3.Connection) -> None:
        """Fail the pages left running that were claimed `MAX_CLAIMS` times: each claim ended
        with the process (killed, out of memory), so the page itself may be what kills it; it
        must not do so at every start (as PostgreSQL's store does)."""
        for page in db.execute(
            "SELECT p.job_id, p.seq, p.attempts FROM pages p JOIN jobs j ON j.id = p.job_id"
            " WHERE p.status = 'running' AND j.status IN ('queued', 'running')"
            " AND p.attempts >= ?",
            (MAX_CLAIMS,),
        ).fetchall():
            message = (
                f"Abandoned after {page['attempts']} claims that never ended: the server"
                " stopped (killed, out of memory) each time it ran the page"
            )
            logger.warning("job %s page %d: %s", page["job_id"], page["seq"], message)
            self._finish_page(db, page["job_id"], page["seq"], "failed", "page_abandoned", message)

    def _finish_page(
        self,
        db: sqlite3.Connection,
        job_id: str,
        seq: int,
        status: str,
        code: str | None,
        message: str | None,
    ) -> None:
        job = db.execute(
            "SELECT pages_total, pages_done, pages_failed FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        order = job["pages_done"] + job["pages_failed"] + 1
        db.execute(
            "UPDATE pages SET status = ?, finished_order = ?, error_code = ?, error_message = ?"
            " WHERE job_id = ? AND seq = ?",
            (status, order, code, message, job_id, seq),
        )
        done = job["pages_done"] + (status == "done")
        failed = job["pages_failed"] + (status == "failed")
        final: JobStatus | None = None
        if done + failed == job["pages_total"]:
            final = "succeeded" if failed == 0 else "failed"
        db.execute(
            "UPDATE jobs SET pages_done = ?, pages_failed = ?, status = COALESCE(?, status),"
            " finished_at = CASE WHEN ? IS NULL THEN finished_at ELSE ? END WHERE id = ?",
            (done, failed, final, final, self._clock(), job_id),
        )

    def _sweep_orphans(self, older_than: float | None = None) -> None:
        """Remove job directories without a row: uploads cut short by a crash (at open), and
        those last changed before `older_than` (a submit that failed, its row never committed).

        The caller holds the store's lock when `older_than` is None (at open).
        """
        if not self.jobs_root.is_dir() or self._db is None:
            return
        if older_than is None:
            known = {row[0] for row in self._db.execute("SELECT id FROM jobs")}
            self.remove_orphans(self.jobs_root.iterdir(), known)
        else:
            self.remove_stale_orphans(older_than, self._known_jobs)

    def _known_jobs(self, names: list[str]) -> set[str]:
        with self._locked() as db:
            return {row[0] for row in db.execute("SELECT id FROM jobs")} & set(names)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None


def _take_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as err:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise JobStoreUnavailable(
            f"The job store {path.parent} is in use by pid {holder} (jobs.data_dir)"
        ) from err
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
