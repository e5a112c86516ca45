"""The PostgreSQL job store's schema (versioned in the one-row table `ocr_schema`) and migrations.

The tables mirror SQLite's (`serving.jobs.store.sqlite_schema`), prefixed `ocr_` to live beside
others in a database, with a page's lease (`lease_owner`, `lease_expires_at`) and result
(`result`) added.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.rows import DictRow

from serving.jobs.store.sqlite_schema import check_version, statements
from serving.jobs.store.types import JobStoreUnavailable

Connection = psycopg.Connection[DictRow]
"""A connection whose rows are dicts by column name."""

SCHEMA_VERSION = 3
_SCHEMA_LOCK = 0x6F63725F6A6F6273
"""`pg_advisory_xact_lock` key: one replica migrates at a time."""

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE ocr_jobs (
        n BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        options TEXT NOT NULL,
        pages_total INTEGER NOT NULL,
        pages_done INTEGER NOT NULL DEFAULT 0,
        pages_failed INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION
    );
    CREATE INDEX ocr_jobs_by_status ON ocr_jobs (status, finished_at);
    CREATE TABLE ocr_files (
        job_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        stored_as TEXT NOT NULL,
        kind TEXT NOT NULL,
        pages INTEGER NOT NULL,
        size_bytes BIGINT NOT NULL,
        PRIMARY KEY (job_id, idx)
    );
    CREATE TABLE ocr_pages (
        job_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        file_idx INTEGER NOT NULL,
        page INTEGER NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT, -- who holds a running page, or committed a finished one
        lease_expires_at DOUBLE PRECISION,
        finished_order INTEGER,
        error_code TEXT,
        error_message TEXT,
        result BYTEA,
        PRIMARY KEY (job_id, seq),
        UNIQUE (job_id, finished_order),
        CHECK (status <> 'running' OR lease_owner IS NOT NULL),
        CHECK ((status = 'done') = (result IS NOT NULL))
    );
    CREATE INDEX ocr_pages_open ON ocr_pages (job_id, seq) WHERE status IN ('pending', 'running');
    """,
    # As SQLite's version 2: the API key that submitted a job; NULL before, or without keys.
    2: """
    ALTER TABLE ocr_jobs ADD COLUMN owner TEXT;
    CREATE INDEX ocr_jobs_by_owner ON ocr_jobs (owner, created_at);
    """,
    # As SQLite's version 3: a job's webhooks and exports, and their deliveries.
    3: """
    ALTER TABLE ocr_jobs ADD COLUMN hooks TEXT;
    ALTER TABLE ocr_jobs ADD COLUMN hooks_pending INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX ocr_jobs_hooks_pending ON ocr_jobs (hooks_pending) WHERE hooks_pending = 1;
    ALTER TABLE ocr_files ADD COLUMN notify INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX ocr_files_notify ON ocr_files (job_id) WHERE notify = 1;
    CREATE TABLE ocr_deliveries (
        id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        event TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        next_at DOUBLE PRECISION NOT NULL,
        claimed_until DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        last_error TEXT,
        log TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX ocr_deliveries_due ON ocr_deliveries (status, next_at);
    CREATE INDEX ocr_deliveries_by_job ON ocr_deliveries (job_id, created_at);
    """,
}


TABLES = ("ocr_jobs", "ocr_files", "ocr_pages", "ocr_deliveries")
"""What the server reads and writes; `ocr_schema` it only reads once migrated."""
MIGRATE_COMMAND = "python -m serving.jobs.migrate --url ADMIN_URL"


def schema_version(conn: Connection) -> int | None:
    """The schema's version; None where there is no `ocr_schema` table yet. Reads only."""
    if _value(conn, "SELECT to_regclass('ocr_schema')") is None:
        return None
    row = conn.execute("SELECT version FROM ocr_schema").fetchone()
    return 0 if row is None else int(row["version"])


def migrate(conn: Connection) -> None:
    """Bring the schema to `SCHEMA_VERSION`; replicas starting together take turns.

    A schema already at `SCHEMA_VERSION` is left alone without any DDL, so the server may run as
    a role that can only read and write the tables; `python -m serving.jobs.migrate` migrates
    with another (issue 37, item 13).

    Raises:
        JobStoreUnavailable: the store was made by a newer version of the server, or needs a
            migration this role may not run.
    """
    version = schema_version(conn)
    if version == SCHEMA_VERSION:
        return
    check_version(version or 0, SCHEMA_VERSION)
    try:
        _migrate(conn)
    except (errors.InsufficientPrivilege, errors.InvalidSchemaName) as err:
        raise JobStoreUnavailable(
            f"The job store's schema is at version {version or 0} and this server needs "
            f"{SCHEMA_VERSION}, but its database role may not change the schema ({err}): "
            f"migrate it with a role that may ({MIGRATE_COMMAND})"
        ) from err


def _migrate(conn: Connection) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
    conn.execute("CREATE TABLE IF NOT EXISTS ocr_schema (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM ocr_schema").fetchone()
    version = 0 if row is None else int(row["version"])
    check_version(version, SCHEMA_VERSION)
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for statement in statements(_MIGRATIONS[target]):
            conn.execute(statement.encode())
    if row is None:
        conn.execute("INSERT INTO ocr_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
    elif version < SCHEMA_VERSION:
        conn.execute("UPDATE ocr_schema SET version = %s", (SCHEMA_VERSION,))


def grant(conn: Connection, role: str) -> None:
    """Let `role` run the server on the migrated schema: use it, read and write its tables,
    number new jobs, read its version; no DDL."""
    schema = sql.Identifier(str(_value(conn, "SELECT current_schema()")))
    sequence = _value(conn, "SELECT pg_get_serial_sequence('ocr_jobs', 'n')")  # quoted already
    who = sql.Identifier(role)
    tables = sql.SQL(", ").join(sql.Identifier(table) for table in TABLES)
    for statement in (
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, who),
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(tables, who),
        sql.SQL("GRANT SELECT ON ocr_schema TO {}").format(who),
        sql.SQL("GRANT USAGE ON SEQUENCE {} TO {}").format(sql.SQL(str(sequence)), who),
    ):
        conn.execute(statement)


def _value(conn: Connection, query: str) -> Any:
    """The one value a one-row query returns."""
    row = conn.execute(query.encode()).fetchone()
    return None if row is None else next(iter(row.values()))
