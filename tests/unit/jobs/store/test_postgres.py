"""The PostgreSQL job store's lease SQL, read without a database: every lease is set and compared
against the database's clock (`DB_NOW`), and no replica time is bound into a lease statement
(tests/integration/test_jobs_shared_store.py runs the same statements on a real PostgreSQL with
replicas' clocks an hour apart)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from serving.jobs.store.postgres import PostgresJobStore
from serving.jobs.store.postgres_rows import DB_NOW, PageEnd, end_page
from tests.clock import ManualClock

REPLICA_NOW = 1_700_000_000.0


class _Result:
    rowcount = 0

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []


class RecordingConnection:
    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = None) -> _Result:
        self.statements.append((sql, params))
        return _Result()


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RecordingConnection:
    conn = RecordingConnection()
    store = PostgresJobStore(
        "postgresql://ocr@db/ocr", uploads_dir=tmp_path, clock=ManualClock(REPLICA_NOW)
    )
    monkeypatch.setattr(store, "_call", lambda work, **_: work(conn))
    store.claim_next()
    store.renew_leases([("j", 0)])
    store._reset_lapsed(conn)  # type: ignore[arg-type]
    end_page(conn, "j", 0, PageEnd("failed", code="x", message="y"), now=0.0, holder=None)  # type: ignore[arg-type]
    return conn


def test_every_lease_is_timed_by_the_database(recorded: RecordingConnection) -> None:
    leases = [(sql, params) for sql, params in recorded.statements if "lease_expires_at" in sql]
    assert len(leases) >= 5  # abandoned, claim, renew, reset, end of a lapsed page
    for sql, _params in leases:
        for match in re.finditer(r"lease_expires_at\s*(<|=)", sql):
            assert sql[match.end() :].lstrip().startswith(("NULL", DB_NOW)), sql
    assert "extract(epoch FROM now())" in DB_NOW


def test_no_replica_time_is_bound_into_a_lease_statement(recorded: RecordingConnection) -> None:
    for sql, params in recorded.statements:
        if "lease_expires_at <" in sql or f"lease_expires_at = {DB_NOW}" in sql:
            values = params.values() if isinstance(params, dict) else (params or ())
            assert all(not isinstance(v, float) or abs(v - REPLICA_NOW) > 86400 for v in values), (
                sql
            )
