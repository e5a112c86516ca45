"""The job store seam: what the runner and the jobs API need of a store, and the configured one.

Two implementations: `SqliteJobStore` (embedded, one server; the default) and `PostgresJobStore`
(one store shared by replicas, pages claimed with leases). Both commit each page exactly once:
a result is committed only by the holder of the page's claim, while its job is running.

The package: `sqlite` and `postgres` (the stores), `sqlite_schema` and `postgres_schema` (their
tables and migrations), `queries` and `rows` (the statements and rows both run, one dialect
apart), `postgres_rows` (a page's end under a lease), `types` (the values the API reports),
`job_dirs` (the job directories both keep on disk, their base class), `durable` (file writes)
and `deliveries` (a job's webhooks and export, queued when it ends, their statements and methods).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from serving.config import JobsConfig
from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store.deliveries import Attempt, Delivery, DeliveryInfo, NewDelivery
from serving.jobs.store.types import (
    FinishedPage,
    JobInfo,
    JobStatus,
    PageTask,
    StoredLimits,
    StoredUsage,
)


class JobStore(Protocol):
    """Jobs, their files and pages; methods are synchronous (async callers use `to_thread`).

    Raises of every method but `open`: `JobStoreUnavailable` when the store is not open or cannot
    be reached; `JobNotFound` where a job is named and there is none.
    """

    @property
    def poll_interval_s(self) -> float | None:
        """How often to look for pages and results other processes changed; None: none do."""

    @property
    def lease_s(self) -> float | None:
        """How long a claim lasts unless renewed (`renew_leases`); None: claims never lapse."""

    @property
    def location(self) -> str:
        """Where the store is, for logs (no password)."""

    @property
    def exists(self) -> bool:
        """Whether a store was ever created here (there may be jobs to resume)."""

    @property
    def is_open(self) -> bool:
        """Whether `open` succeeded and `close` was not called since."""

    def open(self) -> int:
        """Create or open the store; returns how many pages left running went back to pending."""

    def close(self) -> None:
        """Close the store (waits for a call in progress)."""

    def job_dir(self, job_id: str) -> Path:
        """Where a job's uploaded files are staged (`job_dir / "files"`)."""

    def discard(self, job_id: str) -> None:
        """Remove the directory of a job that was never created (its upload was refused)."""

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
        submitted by the API key `owner` (None: authentication is off), within the owner's
        `limits` (checked with the owner's other submits serialised), with its `hooks`: its end
        (and its documents') will queue their deliveries.

        Raises:
            StoredQuotaExceeded: the job would take its owner past `limits` (nothing recorded).
        """

    def usage(self, owner: str | None) -> StoredUsage:
        """Jobs, bytes of uploads and pages `owner` holds in the store, every status."""

    def expire_queued(self, max_queued_s: float) -> list[str]:
        """Fail the jobs still queued (none of their pages started) `max_queued_s` after they
        were created, each page with `expired`; returns their ids."""

    def get_job(self, job_id: str) -> JobInfo:
        """The job's state, with its files and failed pages."""

    def list_jobs(
        self, *, status: JobStatus | None = None, limit: int = 100, owner: str | None = None
    ) -> list[JobInfo]:
        """Jobs, newest first; with `owner`, only that key's."""

    def counts(self) -> dict[str, int]:
        """Jobs per status (every status present, zero where none)."""

    def cancel_job(self, job_id: str) -> JobInfo:
        """Mark a queued or running job cancelled; a finished job is left as it is."""

    def delete_job(self, job_id: str) -> None:
        """Delete a job's rows, uploads and results."""

    def purge_expired(self, retention_s: float) -> list[str]:
        """Delete jobs that finished more than `retention_s` ago; returns their ids."""

    def claim_next(self) -> PageTask | None:
        """Claim the next page to run: of the owner (API key) with the fewest pages running, then
        its active job with the fewest, then the oldest, so tenants share the runner's slots and
        then their jobs do; None when there is none."""

    def complete_page(self, job_id: str, seq: int, line: bytes) -> bool:
        """Commit a claimed page's result line; False (nothing written) when the claim is gone:
        the job was cancelled or deleted, or the page was committed or taken over."""

    def fail_page(self, job_id: str, seq: int, code: str, message: str) -> bool:
        """Record that a claimed page failed; False when the claim is gone."""

    def release_page(self, job_id: str, seq: int, *, refund: bool = False) -> bool:
        """Give a claimed page back to pending; `refund` takes back the attempt it counted."""

    def renew_leases(self, pages: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Extend the claims on `pages` (job id, seq); returns those no longer held (taken over,
        or their job ended): their work is lost and should stop."""

    def finished_pages(
        self, job_id: str, *, after_order: int = 0, from_seq: int | None = None
    ) -> tuple[JobInfo, list[FinishedPage]]:
        """The job and its finished pages, in completion order after `after_order`, or (with
        `from_seq`) in document order from `from_seq` up to the first page not finished."""

    def progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each job's status and finished pages (done or failed), for those of `job_ids` that
        exist."""

    def read_result(self, job_id: str, seq: int) -> bytes:
        """A done page's result line."""

    def enqueue_deliveries(self) -> int:
        """Queue the deliveries (webhooks, exports) of the documents and jobs that ended since
        the last call, each event once; returns how many were queued."""

    def claim_delivery(self, *, webhook_lease_s: float, export_lease_s: float) -> Delivery | None:
        """Take the delivery due first, held from other processes for its kind's lease and
        counted as an attempt; None when none is due."""

    def finish_attempt(
        self,
        delivery_id: str,
        attempt: Attempt,
        *,
        next_at: float | None,
        then: NewDelivery | None = None,
    ) -> bool:
        """Record an attempt on a claimed delivery: due again at `next_at`, or over (delivered
        or failed, as the attempt went), then `then` queued; False when it is gone."""

    def next_delivery_at(self) -> float | None:
        """When the next pending delivery is due; None: none is pending."""

    def deliveries(self, job_id: str) -> list[DeliveryInfo]:
        """The job's deliveries and their attempts, oldest first."""


def build_store(config: JobsConfig) -> JobStore:
    """The store `config.store` names: SQLite under `data_dir`, or a PostgreSQL database."""
    if config.store == "sqlite":
        from serving.jobs.store.sqlite import SqliteJobStore

        return SqliteJobStore(Path(config.data_dir))
    from serving.jobs.store.postgres import PostgresJobStore  # psycopg: the `postgres` extra

    return PostgresJobStore(
        config.store,
        uploads_dir=Path(config.data_dir),
        lease_s=config.lease_s,
        poll_interval_s=config.poll_interval_s,
    )
