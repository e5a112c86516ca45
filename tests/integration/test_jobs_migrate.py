"""The PostgreSQL job store run by a role without DDL (issue 37, item 13), on a real PostgreSQL
(tests/postgres.py): `python -m serving.jobs.migrate` migrates with the admin's URL and grants the
tables; the server's role then opens the store, submits, claims and finishes pages, and migrates
nothing. A schema the role cannot migrate is refused with a message naming the command."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store.deliveries import Attempt
from serving.jobs.store.postgres import PostgresJobStore
from serving.jobs.store.postgres_schema import MIGRATE_COMMAND, SCHEMA_VERSION
from serving.jobs.store.types import JobStoreUnavailable
from tests.postgres import PostgresServer

REPO = Path(__file__).parents[2]


def _app_role(postgres: PostgresServer, admin_url: str) -> tuple[str, str]:
    """A login role that may use the admin's schema but create nothing in it, and its URL."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN".encode())
        conn.execute(f"GRANT USAGE ON SCHEMA {_schema(conn)} TO {role}".encode())
    prefix = f"postgresql://{postgres.user}@"
    return role, admin_url.replace(prefix, f"postgresql://{role}@", 1)


def _schema(conn: psycopg.Connection[tuple[str]]) -> str:
    row = conn.execute("SELECT current_schema()").fetchone()
    assert row is not None
    return row[0]


def _migrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serving.jobs.migrate", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_a_role_without_ddl_serves_a_store_migrated_by_another(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    admin_url = postgres.database()
    role, app_url = _app_role(postgres, admin_url)
    store = PostgresJobStore(app_url, uploads_dir=tmp_path)

    # Nothing migrated yet, and the role may not: refused, naming what to run.
    with pytest.raises(JobStoreUnavailable, match=r"serving\.jobs\.migrate") as refused:
        store.open()
    assert MIGRATE_COMMAND in str(refused.value)

    done = _migrate("--url", admin_url, "--grant", role)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"schema version {SCHEMA_VERSION} (was 0)" in done.stdout

    assert store.open() == 0
    try:
        files = store.job_dir("j1") / "files"
        files.mkdir(parents=True)
        (files / "0").write_bytes(b"%PDF-")
        document = Document(name="a.pdf", path=files / "0", kind="pdf", pages=2, size_bytes=5)
        store.create_job("j1", [document], {}, owner="alice")
        task = store.claim_next()
        assert task is not None
        assert store.complete_page(task.job_id, task.seq, b'{"seq": 0}')
        assert store.get_job("j1").pages_done == 1
        assert [job.id for job in store.list_jobs(owner="alice")] == ["j1"]
        # A job's deliveries (schema 3) are the role's to queue, claim and record too.
        hooks = JobHooks(callback_url="https://hooks.example/ocr")
        (store.job_dir("j2") / "files").mkdir(parents=True)
        (store.job_dir("j2") / "files" / "0").write_bytes(b"%PDF-")
        second = Document(
            name="b.pdf",
            path=store.job_dir("j2") / "files" / "0",
            kind="pdf",
            pages=1,
            size_bytes=5,
        )
        store.create_job("j2", [second], {}, owner="alice", hooks=hooks)
        store.cancel_job("j2")
        assert store.enqueue_deliveries() == 1
        delivery = store.claim_delivery(webhook_lease_s=30.0, export_lease_s=60.0)
        assert delivery is not None
        assert delivery.event == "job.cancelled"
        assert store.finish_attempt(delivery.id, Attempt(at=1.0, ok=True), next_at=None)
        store.delete_job("j2")
        store.delete_job("j1")
    finally:
        store.close()

    # The role really has no DDL: the server ran without any.
    with (
        psycopg.connect(app_url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CREATE TABLE ocr_extra (x INTEGER)")

    # Migrating again is a no-op.
    again = _migrate("--url", admin_url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"(was {SCHEMA_VERSION})" in again.stdout


def test_migrate_refuses_what_is_not_postgresql() -> None:
    done = _migrate("--url", "sqlite")
    assert done.returncode == 2
    assert "not a PostgreSQL store" in done.stdout
