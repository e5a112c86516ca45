"""The statements both job stores run, written once for either SQL dialect: SQLite's tables and
`?` parameters, or PostgreSQL's `ocr_`-prefixed tables and `%s` parameters (same columns)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store.rows import (
    file_rows,
    finished_page,
    finished_run,
    job_detail,
    job_info,
    page_rows,
)
from serving.jobs.store.types import (
    STATUSES,
    FinishedPage,
    JobInfo,
    JobNotFound,
    StoredLimits,
    StoredUsage,
)


class Cursor(Protocol):
    """The rows of a query: `sqlite3.Cursor`, or a psycopg cursor."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...


class Batch(Protocol):
    """A cursor that runs one statement over many rows of parameters."""

    def executemany(self, query: str, params_seq: Sequence[tuple[Any, ...]], /) -> Any: ...

    def close(self) -> None: ...


class Database(Protocol):
    """A connection: `sqlite3.Connection`, or psycopg's."""

    def execute(self, query: str, params: tuple[Any, ...], /) -> Cursor: ...

    def cursor(self) -> Batch: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """A store's table names and parameter marker."""

    jobs: str
    files: str
    pages: str
    param: str
    deliveries: str = "deliveries"
    skip_locked: str = ""
    """What a claiming `SELECT` ends with: PostgreSQL's row locks, skipping those another replica
    holds (SQLite's writers take turns: its transactions are `BEGIN IMMEDIATE`)."""


SQLITE = Dialect(jobs="jobs", files="files", pages="pages", param="?")
POSTGRES = Dialect(
    jobs="ocr_jobs",
    files="ocr_files",
    pages="ocr_pages",
    param="%s",
    deliveries="ocr_deliveries",
    skip_locked=" FOR UPDATE SKIP LOCKED",
)


def insert_job(
    db: Database,
    sql: Dialect,
    job_id: str,
    documents: Sequence[Document],
    options: dict[str, Any],
    *,
    now: float,
    owner: str | None = None,
    limits: StoredLimits | None = None,
    hooks: JobHooks | None = None,
    outputs: Callable[[Sequence[str]], int] | None = None,
) -> JobInfo:
    """Insert a queued job's rows (the job, its files, its pages) in `db`'s transaction, once
    `limits` (the owner's) allow it, its jobs' rendered outputs counted (`outputs`, as
    `stored_usage`); the caller's transaction serialises the owner's submits. With `hooks`, the
    job's end (and its documents', if asked) queues their deliveries
    (`serving.jobs.store.deliveries`).

    Raises:
        StoredQuotaExceeded: the job would take its owner past `limits`.
    """
    p = sql.param
    if limits is not None:
        adding = StoredUsage(
            1, sum(d.size_bytes for d in documents), sum(d.pages for d in documents)
        )
        limits.check(owner, stored_usage(db, sql, owner, outputs), adding)
    db.execute(
        f"INSERT INTO {sql.jobs} (id, status, options, pages_total, created_at, owner)"
        f" VALUES ({p}, 'queued', {p}, {p}, {p}, {p})",
        (job_id, json.dumps(options), sum(d.pages for d in documents), now, owner),
    )
    with contextlib.closing(db.cursor()) as cur:
        cur.executemany(
            f"INSERT INTO {sql.files} (job_id, idx, name, stored_as, kind, pages, size_bytes)"
            f" VALUES ({', '.join([p] * 7)})",
            file_rows(job_id, documents),
        )
        cur.executemany(
            f"INSERT INTO {sql.pages} (job_id, seq, file_idx, page) VALUES ({p}, {p}, {p}, {p})",
            page_rows(job_id, documents),
        )
    if hooks is not None and hooks.wanted:
        db.execute(
            f"UPDATE {sql.jobs} SET hooks = {p}, hooks_pending = 1 WHERE id = {p}",
            (json.dumps(hooks.to_json()), job_id),
        )
        if hooks.calls("document"):
            db.execute(f"UPDATE {sql.files} SET notify = 1 WHERE job_id = {p}", (job_id,))
    return read_job(db, sql, job_id, detail=True)


def set_cancelled(db: Database, sql: Dialect, job_id: str, *, now: float) -> JobInfo:
    """Mark a queued or running job cancelled (a finished one is left as it is), in `db`'s
    transaction; returns the job.

    Raises:
        JobNotFound: no such job.
    """
    p = sql.param
    db.execute(
        f"UPDATE {sql.jobs} SET status = 'cancelled', finished_at = {p}"
        f" WHERE id = {p} AND status IN ('queued', 'running')",
        (now, job_id),
    )
    return read_job(db, sql, job_id, detail=True)


def expired_jobs(db: Database, sql: Dialect, *, finished_before: float) -> list[str]:
    """The ids of the jobs that finished (succeeded, failed or were cancelled) before then."""
    rows = db.execute(
        f"SELECT id FROM {sql.jobs} WHERE status IN ('succeeded', 'failed', 'cancelled')"
        f" AND finished_at < {sql.param}",
        (finished_before,),
    )
    return [row["id"] for row in rows]


def stored_usage(
    db: Database,
    sql: Dialect,
    owner: str | None,
    outputs: Callable[[Sequence[str]], int] | None = None,
) -> StoredUsage:
    """What `owner` (None: jobs submitted without a key) holds in the store, every status: its
    uploads, and the outputs rendered from them (`outputs` of its jobs' ids: the files under
    each job's `outputs/`, which only the disk knows)."""
    p = sql.param
    same = f"(owner = {p} OR (owner IS NULL AND CAST({p} AS TEXT) IS NULL))"
    jobs = db.execute(
        f"SELECT COUNT(*) AS n, COALESCE(SUM(pages_total), 0) AS pages FROM {sql.jobs}"
        f" WHERE {same}",
        (owner, owner),
    ).fetchone()
    stored = db.execute(
        f"SELECT COALESCE(SUM(f.size_bytes), 0) AS n FROM {sql.files} f"
        f" JOIN {sql.jobs} j ON j.id = f.job_id WHERE {same.replace('owner', 'j.owner')}",
        (owner, owner),
    ).fetchone()
    rendered = 0
    if outputs is not None:
        ids = [
            row["id"]
            for row in db.execute(f"SELECT id FROM {sql.jobs} WHERE {same}", (owner, owner))
        ]
        rendered = outputs(ids)
    return StoredUsage(int(jobs["n"]), int(stored["n"]) + rendered, int(jobs["pages"]))


def job_progress(db: Database, sql: Dialect, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Each job's status and finished pages (done or failed), for the ids that are jobs."""
    if not job_ids:
        return {}
    marks = ", ".join(sql.param for _ in job_ids)
    rows = db.execute(
        f"SELECT id, status, pages_done + pages_failed AS finished FROM {sql.jobs}"
        f" WHERE id IN ({marks})",
        tuple(job_ids),
    )
    return {row["id"]: (row["status"], int(row["finished"])) for row in rows}


def expire_queued(db: Database, sql: Dialect, *, created_before: float, now: float) -> list[str]:
    """Fail the jobs still queued (no page started) that were created before then, each page
    with `expired`, in `db`'s transaction; returns their ids. Their files stay until the job is
    deleted or its retention ends.

    The job's row is ended first, only while it is queued: a replica that claims one of its
    pages meanwhile either started it first (the job is running: not expired) or finds it ended
    and cannot commit the page, which is failed with the others.
    """
    p = sql.param
    candidates = [
        row["id"]
        for row in db.execute(
            f"SELECT id FROM {sql.jobs} WHERE status = 'queued' AND created_at < {p}",
            (created_before,),
        )
    ]
    expired = []
    for job_id in candidates:
        ended = db.execute(
            f"UPDATE {sql.jobs} SET status = 'failed', pages_failed = pages_total,"
            f" finished_at = {p} WHERE id = {p} AND status = 'queued'",
            (now, job_id),
        ).rowcount
        if ended != 1:
            continue
        db.execute(
            f"UPDATE {sql.pages} SET status = 'failed', finished_order = seq + 1,"
            f" error_code = 'expired', error_message = {p}"
            f" WHERE job_id = {p} AND status IN ('pending', 'running')",
            (EXPIRED_MESSAGE, job_id),
        )
        expired.append(job_id)
    return expired


EXPIRED_MESSAGE = "The job waited in the queue past jobs.queued_expiry_s and was not run"


def count_jobs(db: Database, sql: Dialect) -> dict[str, int]:
    """Jobs per status (every status present, zero where none)."""
    rows = db.execute(f"SELECT status, COUNT(*) AS n FROM {sql.jobs} GROUP BY status", ())
    found = {row["status"]: int(row["n"]) for row in rows}
    return {status: found.get(status, 0) for status in STATUSES}


def read_job(db: Database, sql: Dialect, job_id: str, *, detail: bool) -> JobInfo:
    """A job's row; with `detail`, its files and failed pages too.

    Raises:
        JobNotFound: no such job.
    """
    p = sql.param
    row = db.execute(f"SELECT * FROM {sql.jobs} WHERE id = {p}", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(f"No job {job_id}")
    if not detail:
        return job_info(row)
    return job_detail(
        row,
        db.execute(f"SELECT * FROM {sql.files} WHERE job_id = {p} ORDER BY idx", (job_id,)),
        db.execute(
            f"SELECT file_idx, page, error_code, error_message FROM {sql.pages}"
            f" WHERE job_id = {p} AND status = 'failed' ORDER BY seq",
            (job_id,),
        ),
    )


def read_finished(
    db: Database, sql: Dialect, job_id: str, *, after_order: int, from_seq: int | None
) -> tuple[JobInfo, list[FinishedPage]]:
    """A job and its finished pages, as `JobStore.finished_pages` describes them; the caller
    makes the reads see one instant.

    Raises:
        JobNotFound: no such job.
    """
    p = sql.param
    info = read_job(db, sql, job_id, detail=False)
    columns = (
        "SELECT p.seq, p.finished_order, p.file_idx, p.page, p.status, p.error_code,"
        f" p.error_message, f.name FROM {sql.pages} p JOIN {sql.files} f"
        f" ON f.job_id = p.job_id AND f.idx = p.file_idx WHERE p.job_id = {p}"
    )
    if from_seq is not None:
        rows = db.execute(f"{columns} AND p.seq >= {p} ORDER BY p.seq", (job_id, from_seq))
        return info, finished_run(rows)
    rows = db.execute(
        f"{columns} AND p.finished_order > {p} ORDER BY p.finished_order", (job_id, after_order)
    )
    return info, [finished_page(row) for row in rows]
