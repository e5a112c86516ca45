"""The events a job's webhook sends, as the Standard Webhooks specification shapes a payload:
`{"type", "timestamp", "data"}`, thin (ids, counts and links; the results are fetched, or were
exported). One schema per type: `job.succeeded`, `job.failed`, `job.cancelled` (the job's end),
`document.completed` (every page of one document ended)."""

from __future__ import annotations

from typing import Any

from serving.jobs.store.types import FileInfo, JobInfo, iso_time

JOB_EVENTS = ("job.succeeded", "job.failed", "job.cancelled")
DOCUMENT_EVENT = "document.completed"


def job_event(info: JobInfo, *, at: float, output: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ended job's event, at `at` (wall clock); `output`: its export's report."""
    data: dict[str, Any] = {
        "id": info.id,
        "status": info.status,
        "pages_total": info.pages_total,
        "pages_done": info.pages_done,
        "pages_failed": info.pages_failed,
        "finished_at": iso_time(info.finished_at),
        "href": f"/v1/jobs/{info.id}",
        "results": f"/v1/jobs/{info.id}/results",
        "documents": f"/v1/jobs/{info.id}/documents",
    }
    if output is not None:
        data["output"] = output
    return {"type": f"job.{info.status}", "timestamp": _z(at), "data": data}


def document_event(
    info: JobInfo, file: FileInfo, *, done: int, failed: int, at: float
) -> dict[str, Any]:
    """The event of a job's document whose pages all ended (`done` of them read, `failed`)."""
    return {
        "type": DOCUMENT_EVENT,
        "timestamp": _z(at),
        "data": {
            "job_id": info.id,
            "index": file.index,
            "name": file.name,
            "pages": file.pages,
            "pages_done": done,
            "pages_failed": failed,
            "status": "succeeded" if failed == 0 else "failed",
            "href": f"/v1/jobs/{info.id}/documents/{file.index}",
        },
    }


def _z(at: float) -> str:
    text = iso_time(at) or ""
    return text.replace("+00:00", "Z")
