"""The job store's SQLite schema (versioned in `PRAGMA user_version`) and migrations; the version
check both stores' migrations make. Rows are read in `serving.jobs.store.rows`."""

from __future__ import annotations

import sqlite3

from serving.jobs.store.types import JobStoreUnavailable

SCHEMA_VERSION = 3


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
    # The API key that submitted a job (issue 26); NULL for jobs made before, or with
    # authentication off: with keys on, only admins see those.
    2: """
    ALTER TABLE jobs ADD COLUMN owner TEXT;
    CREATE INDEX jobs_by_owner ON jobs (owner, created_at);
    """,
    # A job's webhooks and exports (issue 50): what it asked for (`hooks`, JSON), whether its
    # end's deliveries are still to be queued (`hooks_pending`), the documents whose end is
    # still to be told (`notify`), and the deliveries themselves, pending until done.
    3: """
    ALTER TABLE jobs ADD COLUMN hooks TEXT;
    ALTER TABLE jobs ADD COLUMN hooks_pending INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_hooks_pending ON jobs (hooks_pending) WHERE hooks_pending = 1;
    ALTER TABLE files ADD COLUMN notify INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX files_notify ON files (job_id) WHERE notify = 1;
    CREATE TABLE deliveries (
        id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        event TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        next_at REAL NOT NULL,
        claimed_until REAL,
        finished_at REAL,
        last_error TEXT,
        log TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX deliveries_due ON deliveries (status, next_at);
    CREATE INDEX deliveries_by_job ON deliveries (job_id, created_at);
    """,
}


def migrate(db: sqlite3.Connection) -> None:
    """Bring the schema to `SCHEMA_VERSION`, one transaction per version.

    Raises:
        JobStoreUnavailable: the store was made by a newer version of the server.
    """
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    check_version(version, SCHEMA_VERSION)
    for target in range(version + 1, SCHEMA_VERSION + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in statements(_MIGRATIONS[target]):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {target}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def check_version(version: int, known: int) -> None:
    """Refuse a store whose schema `version` is newer than the `known` one.

    Raises:
        JobStoreUnavailable: the store was made by a newer version of the server.
    """
    if version > known:
        raise JobStoreUnavailable(
            f"The job store has schema version {version}; this server knows up to "
            f"{known} (made by a newer version?)"
        )


def statements(script: str) -> list[str]:
    """A migration script's statements (split at `;`; the scripts hold no other `;`)."""
    return [statement for statement in script.split(";") if statement.strip()]
