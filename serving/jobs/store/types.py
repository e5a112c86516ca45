"""Job store values as the API reports them: statuses, jobs, files, pages and their errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from serving.decode.readers import FileKind
from serving.errors import OcrError, StoredQuotaExceeded
from serving.jobs.hooks import JobHooks

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
ACTIVE: tuple[JobStatus, ...] = ("queued", "running")
FINISHED: tuple[JobStatus, ...] = ("succeeded", "failed", "cancelled")
STATUSES: tuple[JobStatus, ...] = (*ACTIVE, *FINISHED)


class JobNotFound(OcrError):
    """No job with this id (never created, or deleted)."""

    http_status = 404
    code = "job_not_found"
    default_message = "Job not found"


class JobStoreUnavailable(OcrError):
    """The store cannot be opened: locked by another process, unreadable, or too new."""

    http_status = 503
    code = "job_store_unavailable"
    default_message = "The job store is unavailable"


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredLimits:
    """What one API key may keep in the store, every job it holds counted whatever its status
    (finished jobs keep their files and results until deleted or expired); 0 is no limit."""

    max_jobs: int = 0
    max_bytes: int = 0
    """Bytes of uploaded files."""
    max_pages: int = 0

    def check(self, owner: str | None, held: StoredUsage, adding: StoredUsage) -> None:
        """Refuse a job that would take `owner` past a limit.

        Raises:
            StoredQuotaExceeded: it would (429; the message names the limit and the key's usage).
        """
        who = "jobs submitted without a key" if owner is None else f"key {owner}"
        for name, limit, now, more, setting in (
            ("jobs", self.max_jobs, held.jobs, adding.jobs, "max_jobs"),
            ("bytes", self.max_bytes, held.bytes, adding.bytes, "max_stored_bytes"),
            ("pages", self.max_pages, held.pages, adding.pages, "max_stored_pages"),
        ):
            if limit and now + more > limit:
                raise StoredQuotaExceeded(
                    f"The store holds {now} {name} of {who}; this job adds {more} and the "
                    f"limit is {limit} ({setting}): delete finished jobs "
                    "(DELETE /v1/jobs/{id}) or wait for them to expire"
                )


@dataclass(frozen=True, slots=True)
class StoredUsage:
    """Jobs, bytes of uploaded files and pages one key holds in the store."""

    jobs: int
    bytes: int
    pages: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FileInfo:
    """One document of a job."""

    index: int
    name: str
    kind: FileKind
    pages: int
    size_bytes: int
    stored_as: str = ""
    """Its upload's file name under `job_dir / "files"` (the original bytes, kept with the job:
    searchable PDFs are made from them)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PageError:
    """A page that failed, and why."""

    file_index: int
    file: str
    page: int
    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        """The page's entry in `failed_pages` and its NDJSON line."""
        return {
            "file": self.file,
            "file_index": self.file_index,
            "page": self.page,
            "error": {"code": self.code, "message": self.message},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class JobInfo:
    """A job's state as the API reports it."""

    id: str
    status: JobStatus
    options: dict[str, Any]
    pages_total: int
    pages_done: int
    pages_failed: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    files: tuple[FileInfo, ...] = ()
    failed: tuple[PageError, ...] = ()
    owner: str | None = None
    """The id of the API key that submitted it; None: submitted with authentication off."""
    hooks: JobHooks = field(default_factory=JobHooks)
    """Its callback and export (`serving.jobs.hooks`); empty for a job that asked for none."""

    @property
    def finished(self) -> bool:
        """Succeeded, failed or cancelled: nothing more will happen to it."""
        return self.status in FINISHED

    def to_json(self, *, detail: bool = True) -> dict[str, Any]:
        """The `GET /v1/jobs/{id}` body (`detail=False`: the `GET /v1/jobs` entry)."""
        body: dict[str, Any] = {
            "id": self.id,
            "status": self.status,
            "pages_total": self.pages_total,
            "pages_done": self.pages_done,
            "pages_failed": self.pages_failed,
            "created_at": iso_time(self.created_at),
            "started_at": iso_time(self.started_at),
            "finished_at": iso_time(self.finished_at),
            "owner": self.owner,
        }
        if detail:
            body["options"] = self.options
            body["files"] = [
                {"name": f.name, "kind": f.kind, "pages": f.pages, "bytes": f.size_bytes}
                for f in self.files
            ]
            body["failed_pages"] = [p.to_json() for p in self.failed]
            body.update(self.hooks.public_json())
        return body


@dataclass(frozen=True, slots=True, kw_only=True)
class PageTask:
    """One claimed page: what the runner needs to OCR it."""

    job_id: str
    seq: int
    file_index: int
    file_name: str
    page: int
    kind: FileKind
    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1
    """Including this one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedPage:
    """A page that is done or failed, in a job's completion or document order."""

    seq: int
    order: int
    file_index: int
    page: int
    error: PageError | None
    """None when the page is done (its result file holds the line)."""


def iso_time(timestamp: float | None) -> str | None:
    """A wall-clock timestamp as ISO 8601 in UTC, or None."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


MAX_CLAIMS = 5
"""Claims of one page that never ended (its process died, or its replica died or stalled) before
it is failed (`page_abandoned`): the page itself may be what kills them. More than the runner's
own tries of a page (`serving.jobs.runner.MAX_ATTEMPTS`), which each count a claim."""
