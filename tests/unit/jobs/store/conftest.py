"""The job store tests' fixtures: a clock the test moves, and each `JobStore` implementation
(SQLite, and PostgreSQL on the server tests start) opened on an empty store."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.jobs.store import JobStore
from serving.jobs.store.postgres import PostgresJobStore
from serving.jobs.store.sqlite import SqliteJobStore
from tests.clock import ManualClock
from tests.postgres import PostgresServer


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock):
    """Each implementation of the `JobStore` protocol, opened on an empty store."""
    built: JobStore
    if request.param == "sqlite":
        built = SqliteJobStore(tmp_path / "jobs", clock=clock)
    else:
        postgres: PostgresServer = request.getfixturevalue("postgres")
        built = PostgresJobStore(postgres.database(), uploads_dir=tmp_path / "jobs", clock=clock)
    built.open()
    yield built
    built.close()
