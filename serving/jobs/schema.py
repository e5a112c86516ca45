"""The job store's SQLite schema (versioned in `PRAGMA user_version`), migrations, and the API's
values read from a row of either store (SQLite's or PostgreSQL's, whose columns are the same)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Protocol, cast

from serving.inputs import FileKind
from serving.jobs.types import FileInfo, FinishedPage, JobInfo, JobStoreUnavailable, PageError

SCHEMA_VERSION = 1


class Row(Protocol):
    """A row read by column name: `sqlite3.Row`, or psycopg's `dict_row`."""

    def __getitem__(self, key: str, /) -> Any: ...


# Migrations from version N-1 to N; a new schema version appends one entry.
_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        options TEXT NOT NULL,
        pages_total INTEGER NOT NULL,
        pages_done INTEGER NOT NULL DEFAULT 0,
        pages_failed INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL
    );
    CREATE INDEX jobs_by_status ON jobs (status, finished_at);
    CREATE TABLE files (
        job_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        stored_as TEXT NOT NULL,
        kind TEXT NOT NULL,
        pages INTEGER NOT NULL,
        size_bytes INTEGER NOT NULL,
        PRIMARY KEY (job_id, idx)
    );
    CREATE TABLE pages (
        job_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        file_idx INTEGER NOT NULL,
        page INTEGER NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        finished_order INTEGER,
        error_code TEXT,
        error_message TEXT,
        PRIMARY KEY (job_id, seq)
    );
    CREATE INDEX pages_by_status ON pages (job_id, status, seq);
    CREATE INDEX pages_by_order ON pages (job_id, finished_order);
    """,
}


def migrate(db: sqlite3.Connection) -> None:
    """Bring the schema to `SCHEMA_VERSION`, one transaction per version.

    Raises:
        JobStoreUnavailable: the store was made by a newer version of the server.
    """
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise JobStoreUnavailable(
            f"The job store has schema version {version}; this server knows up to "
            f"{SCHEMA_VERSION} (made by a newer version?)"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _MIGRATIONS[target].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {target}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def job_info(
    row: Row, *, files: tuple[FileInfo, ...] = (), failed: tuple[PageError, ...] = ()
) -> JobInfo:
    """A `jobs` row, with the job's files and failed pages when given."""
    return JobInfo(
        id=row["id"],
        status=row["status"],
        options=json.loads(row["options"]),
        pages_total=row["pages_total"],
        pages_done=row["pages_done"],
        pages_failed=row["pages_failed"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        files=files,
        failed=failed,
    )


def finished_page(row: Row) -> FinishedPage:
    """A finished `pages` row joined with its file's name."""
    error = page_error(row, row["name"]) if row["status"] == "failed" else None
    return FinishedPage(
        seq=row["seq"],
        order=row["finished_order"],
        file_index=row["file_idx"],
        page=row["page"],
        error=error,
    )


def file_info(row: Row) -> FileInfo:
    """A `files` row."""
    return FileInfo(
        index=row["idx"],
        name=row["name"],
        kind=cast(FileKind, row["kind"]),
        pages=row["pages"],
        size_bytes=row["size_bytes"],
    )


def page_error(row: Row, file: str) -> PageError:
    """A failed `pages` row."""
    return PageError(
        file_index=row["file_idx"],
        file=file,
        page=row["page"],
        code=row["error_code"] or "internal",
        message=row["error_message"] or "",
    )
