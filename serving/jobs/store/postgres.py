"""The job store replicas share: jobs, files, pages and page results in PostgreSQL.

Any replica accepts a job (its uploads staged under `uploads_dir`, a directory every replica
mounts at the same path) and any replica answers for it. Pages are claimed with leases: `claim_next`
takes a pending page, or one whose lease has lapsed (its replica died), with
`SELECT ... FOR UPDATE SKIP LOCKED`, so replicas never wait on each other's claims; the runner
renews the leases of the pages it works on (`renew_leases`) every third of `lease_s`. A result is
committed, in the page's row, only by the lease holder while the page runs in a running job, in one
transaction with the job's counters, so each page is committed exactly once; `(job_id,
finished_order)` is unique besides. A page claimed `MAX_CLAIMS` times without an end is failed
rather than passed on again. Leases are timed by the database's clock (`now()`, in
`postgres_rows.DB_NOW`): a lease is taken, renewed and found lapsed against that one clock, so a
replica whose clock is wrong neither takes live leases nor loses its own. The jobs' timestamps
(created, started, finished, and so retention) are the replicas' wall-clock seconds
(`time.time()`): they only order and age jobs.

Methods are synchronous and serialised by a lock over one connection; async callers run them with
`asyncio.to_thread`. A lost connection answers `JobStoreUnavailable` (503) and is made again on the
next call; a deadlock between replicas (PostgreSQL aborts one side) is retried.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import errors
from psycopg.rows import dict_row

from serving.config import redact_url
from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store import deliveries
from serving.jobs.store.deliveries import DeliveryStore
from serving.jobs.store.job_dirs import JobDirs
from serving.jobs.store.postgres_rows import DB_NOW, PageEnd, PageGone, end_page
from serving.jobs.store.postgres_schema import Connection, migrate
from serving.jobs.store.queries import (
    POSTGRES,
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

_RETRIES = 5
"""Tries of a transaction that PostgreSQL aborted for a deadlock or a serialisation conflict."""
_UNREACHABLE = "The job store is unreachable; the server's log says why"
"""What a client is told: libpq's own message names the database's host, port and user (issue
49), which only the log shows."""
_BUSY = "The job store is busy; retry later"
_OWNER_LOCK = 0x71756F7461
"""Seed of the `pg_advisory_xact_lock` key of an owner's submits (its quota is checked by one)."""


class PostgresJobStore(JobDirs, DeliveryStore):
    """Jobs in the PostgreSQL database at `url`; see the module docstring for the guarantees."""

    def __init__(
        self,
        url: str,
        *,
        uploads_dir: Path,
        lease_s: float = 30.0,
        poll_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
    ) -> None:
        super().__init__(uploads_dir)
        self.url = url
        self.uploads_dir = uploads_dir
        self.lease_s = lease_s
        self.poll_interval_s = poll_interval_s
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """Names this store's leases; the pid lets an operator see which replica holds a page."""
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._open = False
        self._dialect = POSTGRES

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The database (password hidden) and the uploads directory, for logs."""
        return f"{redact_url(self.url)} (uploads in {self.uploads_dir})"

    @property
    def exists(self) -> bool:
        """Always: the database is there, or `open` says why not; other replicas may have jobs."""
        return True

    @property
    def is_open(self) -> bool:
        """Whether `open` succeeded and `close` was not called since."""
        return self._open

    def open(self) -> int:
        """Connect, create or migrate the schema, and set pages whose lease lapsed back to pending.

        Raises:
            JobStoreUnavailable: the database cannot be reached, or has a newer schema.
        """
        if self._open:
            return 0
        try:
            self._call(migrate, opening=True)
            reset = self._call(self._reset_lapsed, opening=True)
        except BaseException:
            self.close()
            raise
        self._open = True
        return reset

    def close(self) -> None:
        """Close the connection (waits for a call in progress)."""
        with self._lock:
            self._open = False
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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
        """Record a queued job whose documents already sit under `job_dir(job_id) / "files"`,
        with its `hooks` (callback, export), within its owner's `limits` (one submit of an
        owner at a time checks them, in every
        replica: an advisory lock on the owner).

        The documents and the directories naming them reach the disk before the job's rows.

        Raises:
            StoredQuotaExceeded: the job would take its owner past `limits`.
        """
        self.sync_uploads(job_id, documents)
        now = self._clock()

        def insert(conn: Connection) -> JobInfo:
            if limits is not None:
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                    (owner or "", _OWNER_LOCK),
                )
            return insert_job(
                conn,
                POSTGRES,
                job_id,
                documents,
                options,
                now=now,
                owner=owner,
                limits=limits,
                hooks=hooks,
                outputs=self.outputs_bytes,
            )

        return self._call(insert)

    def expire_queued(self, max_queued_s: float) -> list[str]:
        """Fail the jobs still queued `max_queued_s` after they were created; returns their ids."""
        now = self._clock()
        return self._call(
            lambda conn: expire_queued(conn, POSTGRES, created_before=now - max_queued_s, now=now)
        )

    def usage(self, owner: str | None) -> StoredUsage:
        """What `owner` holds in the store (None: jobs submitted without a key)."""
        return self._call(lambda conn: stored_usage(conn, POSTGRES, owner, self.outputs_bytes))

    def get_job(self, job_id: str) -> JobInfo:
        """The job's state, with its files and failed pages.

        Raises:
            JobNotFound: no such job.
        """
        return self._call(lambda conn: read_job(conn, POSTGRES, job_id, detail=True))

    def list_jobs(
        self, *, status: JobStatus | None = None, limit: int = 100, owner: str | None = None
    ) -> list[JobInfo]:
        """Jobs, newest first; with `owner`, only that key's."""

        def query(conn: Connection) -> list[JobInfo]:
            rows = conn.execute(
                "SELECT * FROM ocr_jobs WHERE (%(status)s::text IS NULL OR status = %(status)s)"
                " AND (%(owner)s::text IS NULL OR owner = %(owner)s)"
                " ORDER BY created_at DESC, n DESC LIMIT %(limit)s",
                {"status": status, "owner": owner, "limit": limit},
            ).fetchall()
            return [job_info(row) for row in rows]

        return self._call(query)

    def counts(self) -> dict[str, int]:
        """Jobs per status (every status present, zero where none)."""

        return self._call(lambda conn: count_jobs(conn, POSTGRES))

    def cancel_job(self, job_id: str) -> JobInfo:
        """Mark a queued or running job cancelled; a finished job is left as it is.

        Raises:
            JobNotFound: no such job.
        """
        now = self._clock()
        return self._call(lambda conn: set_cancelled(conn, POSTGRES, job_id, now=now))

    def delete_job(self, job_id: str) -> None:
        """Delete a job's rows and results, then its uploads (a page being OCR'd is not committed).

        Raises:
            JobNotFound: no such job.
        """

        def delete(conn: Connection) -> None:
            # Pages before the job: the order `complete_page` locks them in, so no deadlock.
            conn.execute("DELETE FROM ocr_pages WHERE job_id = %s", (job_id,))
            conn.execute("DELETE FROM ocr_files WHERE job_id = %s", (job_id,))
            deliveries.delete_of_job(conn, POSTGRES, job_id)
            if conn.execute("DELETE FROM ocr_jobs WHERE id = %s", (job_id,)).rowcount == 0:
                raise JobNotFound(f"No job {job_id}")

        self._call(delete)
        self.discard(job_id)

    def purge_expired(self, retention_s: float) -> list[str]:
        """Delete jobs that finished more than `retention_s` ago, and upload directories older than
        that without a job (a replica died mid-upload); returns the ids of the jobs deleted."""
        cutoff = self._clock() - retention_s
        ids = self._call(lambda conn: expired_jobs(conn, POSTGRES, finished_before=cutoff))
        for job_id in ids:
            with contextlib.suppress(JobNotFound):  # another replica deleted it first
                self.delete_job(job_id)
        self.remove_stale_orphans(cutoff, self._known_jobs)
        return ids

    # --- pages --------------------------------------------------------------------------------

    def claim_next(self) -> PageTask | None:
        """Lease the next page, a pending one or one whose lease lapsed, of the tenant (owner) with
        the fewest pages running (in all replicas), then its active job with the fewest, then the
        oldest: tenants share the runners' slots, then their jobs do.

        None when there is none (or every candidate is being claimed by another replica).
        """
        now = self._clock()

        def claim(conn: Connection) -> PageTask | None:
            self._fail_abandoned(conn, now)
            page = conn.execute(
                "WITH active AS ("
                " SELECT j.id, j.n, j.owner, (SELECT count(*) FROM ocr_pages r"
                "  WHERE r.job_id = j.id AND r.status = 'running') AS running"
                " FROM ocr_jobs j WHERE j.status IN ('queued', 'running')),"
                " tenants AS (SELECT owner, sum(running) AS running FROM active GROUP BY owner),"
                " next AS ("
                " SELECT p.job_id, p.seq FROM ocr_pages p JOIN active a ON a.id = p.job_id"
                " JOIN tenants t ON t.owner IS NOT DISTINCT FROM a.owner"
                " WHERE p.status = 'pending'"
                f"  OR (p.status = 'running' AND p.lease_expires_at < {DB_NOW})"
                " ORDER BY t.running, a.running, a.n, p.seq LIMIT 1 FOR UPDATE OF p SKIP LOCKED)"
                " UPDATE ocr_pages p SET status = 'running', attempts = p.attempts + 1,"
                f" lease_owner = %(owner)s, lease_expires_at = {DB_NOW} + %(lease_s)s"
                " FROM next WHERE p.job_id = next.job_id AND p.seq = next.seq"
                " RETURNING p.job_id, p.seq, p.file_idx, p.page, p.attempts",
                {"owner": self.owner, "lease_s": self.lease_s},
            ).fetchone()
            if page is None:
                return None
            job_id = page["job_id"]
            row = conn.execute(
                "SELECT f.name, f.stored_as, f.kind, j.options FROM ocr_files f"
                " JOIN ocr_jobs j ON j.id = f.job_id WHERE f.job_id = %s AND f.idx = %s",
                (job_id, page["file_idx"]),
            ).fetchone()
            if row is None:  # impossible: a page's file is written with it and deleted with it
                raise JobStoreUnavailable(f"Job {job_id} has a page without its file")
            conn.execute(
                "UPDATE ocr_jobs SET status = 'running', started_at = COALESCE(started_at, %s)"
                " WHERE id = %s AND status = 'queued'",
                (now, job_id),
            )
            return page_task(
                page, row, options=row["options"], attempts=page["attempts"], job_dir=self.job_dir
            )

        return self._call(claim)

    def complete_page(self, job_id: str, seq: int, line: bytes) -> bool:
        """Commit a leased page's result line, once; False (nothing written) when this store no
        longer holds the page's lease in a running job: cancelled, deleted, or taken over."""
        return self._finish(job_id, seq, PageEnd("done", line=line))

    def fail_page(self, job_id: str, seq: int, code: str, message: str) -> bool:
        """Record that a leased page failed; False when the lease or the running job is gone."""
        return self._finish(job_id, seq, PageEnd("failed", code=code, message=message))

    def release_page(self, job_id: str, seq: int, *, refund: bool = False) -> bool:
        """Give a leased page back to pending; `refund` takes back the attempt its claim counted."""
        return self._call(
            lambda conn: (
                conn.execute(
                    "UPDATE ocr_pages SET status = 'pending', attempts = attempts - %s,"
                    " lease_owner = NULL, lease_expires_at = NULL"
                    " WHERE job_id = %s AND seq = %s AND status = 'running' AND lease_owner = %s",
                    (int(refund), job_id, seq, self.owner),
                ).rowcount
                == 1
            )
        )

    def renew_leases(self, pages: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Extend the leases on `pages`; returns those this store no longer holds in a running
        job (taken over after a lapse, or the job was cancelled or deleted). A page this store
        has just committed is not lost: its task is ending."""
        if not pages:
            return set()
        keys = {
            "lease_s": self.lease_s,
            "owner": self.owner,
            "ids": [job_id for job_id, _ in pages],
            "seqs": [seq for _, seq in pages],
        }
        listed = (
            " AND (p.job_id, p.seq) IN (SELECT * FROM unnest(%(ids)s::text[], %(seqs)s::int[]))"
        )

        def renew(conn: Connection) -> set[tuple[str, int]]:
            held = conn.execute(
                f"UPDATE ocr_pages p SET lease_expires_at = {DB_NOW} + %(lease_s)s FROM ocr_jobs j"
                " WHERE j.id = p.job_id AND j.status = 'running' AND p.status = 'running'"
                f" AND p.lease_owner = %(owner)s{listed} RETURNING p.job_id, p.seq",
                keys,
            ).fetchall()
            done = conn.execute(
                "SELECT p.job_id, p.seq FROM ocr_pages p WHERE p.status IN ('done', 'failed')"
                f" AND p.lease_owner = %(owner)s{listed}",
                keys,
            ).fetchall()
            return {(row["job_id"], row["seq"]) for row in (*held, *done)}

        return set(pages) - self._call(renew)

    def finished_pages(
        self, job_id: str, *, after_order: int = 0, from_seq: int | None = None
    ) -> tuple[JobInfo, list[FinishedPage]]:
        """The job and its finished pages: after `after_order` in completion order, or (with
        `from_seq`) the finished pages from `from_seq` on in document order, stopping at the
        first page not finished yet. Both are read in one transaction.

        Raises:
            JobNotFound: no such job.
        """

        def query(conn: Connection) -> tuple[JobInfo, list[FinishedPage]]:
            # One snapshot for the job and its pages (READ COMMITTED would take one per query).
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return read_finished(conn, POSTGRES, job_id, after_order=after_order, from_seq=from_seq)

        return self._call(query)

    def progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each job's status and finished pages, for those of `job_ids` that exist: one query
        for every job a replica's results streams follow (`serving.jobs.follow`)."""
        return self._call(lambda conn: job_progress(conn, POSTGRES, job_ids))

    def read_result(self, job_id: str, seq: int) -> bytes:
        """A done page's result line.

        Raises:
            JobNotFound: the job (and so its results) was deleted.
        """
        row = self._call(
            lambda conn: conn.execute(
                "SELECT result FROM ocr_pages WHERE job_id = %s AND seq = %s AND status = 'done'",
                (job_id, seq),
            ).fetchone()
        )
        if row is None:
            raise JobNotFound(f"No job {job_id}")
        return bytes(row["result"])

    # --- internals ----------------------------------------------------------------------------

    def _finish(self, job_id: str, seq: int, end: PageEnd) -> bool:
        now = self._clock()

        def finish(conn: Connection) -> bool:
            return end_page(conn, job_id, seq, end, now=now, holder=self.owner)

        try:
            return self._call(finish)
        except PageGone:
            return False

    def _fail_abandoned(self, conn: Connection, now: float) -> None:
        """Fail the pages claimed `MAX_CLAIMS` times without an end: each replica that took one
        died or stalled, so the page itself may be what kills them; it must not take them all."""
        pages = conn.execute(
            "SELECT p.job_id, p.seq, p.attempts FROM ocr_pages p JOIN ocr_jobs j ON j.id = p.job_id"
            " WHERE j.status = 'running' AND p.attempts >= %(max)s AND (p.status = 'pending'"
            f"  OR (p.status = 'running' AND p.lease_expires_at < {DB_NOW}))"
            " FOR UPDATE OF p SKIP LOCKED",
            {"max": MAX_CLAIMS},
        ).fetchall()
        for page in pages:
            message = (
                f"Abandoned after {page['attempts']} claims that never ended: each replica that"
                " ran the page died or stalled past its lease (jobs.lease_s)"
            )
            logger.warning("job %s page %d: %s", page["job_id"], page["seq"], message)
            with contextlib.suppress(PageGone), conn.transaction():  # a savepoint per page
                end_page(
                    conn,
                    page["job_id"],
                    page["seq"],
                    PageEnd("failed", code="page_abandoned", message=message),
                    now=now,
                    holder=None,
                )

    def _reset_lapsed(self, conn: Connection) -> int:
        return conn.execute(
            "UPDATE ocr_pages SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL"
            f" WHERE status = 'running' AND lease_expires_at < {DB_NOW} AND job_id IN"
            " (SELECT id FROM ocr_jobs WHERE status IN ('queued', 'running'))"
        ).rowcount

    def _known_jobs(self, names: list[str]) -> set[str]:
        return self._call(
            lambda conn: {
                row["id"]
                for row in conn.execute("SELECT id FROM ocr_jobs WHERE id = ANY(%s)", (names,))
            }
        )

    def _tx(self, work: Callable[[Connection], T]) -> T:
        return self._call(work)

    def _call(self, work: Callable[[Connection], T], *, opening: bool = False) -> T:
        """Run `work` in one transaction, retried on deadlock; connection errors answer 503."""
        with self._lock:
            if not (self._open or opening):
                raise JobStoreUnavailable("The job store is not open")
            for attempt in range(1, _RETRIES + 1):
                try:
                    conn = self._connection()
                    with conn.transaction():
                        return work(conn)
                except (errors.DeadlockDetected, errors.SerializationFailure) as err:
                    if attempt == _RETRIES:
                        logger.warning("job store busy after %d tries: %s", attempt, err)
                        raise JobStoreUnavailable(_BUSY) from err
                    logger.info("job store: %s; trying again", type(err).__name__)
                except psycopg.OperationalError as err:
                    self._drop()
                    logger.warning("job store unreachable: %s", err)
                    raise JobStoreUnavailable(_UNREACHABLE) from err
            raise AssertionError("unreachable")  # the loop returns or raises

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(
                    self.url, autocommit=True, row_factory=dict_row, connect_timeout=10
                )
            except psycopg.Error as err:  # down, refused, or a URL libpq cannot read
                logger.warning("job store unreachable: %s", err)
                raise JobStoreUnavailable(_UNREACHABLE) from err
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
