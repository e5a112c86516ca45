"""Row operations of the PostgreSQL job store: a page's end counted in its job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from serving.jobs.store.postgres_schema import Connection

DB_NOW = "extract(epoch FROM now())::double precision"
"""The database's clock in seconds, as `lease_expires_at` holds them: every lease is taken, renewed
and found lapsed against it, never against a replica's clock (replicas' clocks may disagree;
SQLite's store runs on one machine and keeps `time.time()`)."""


class PageGone(Exception):
    """Roll the transaction back: the page's claim or its job is gone, nothing is written."""


@dataclass(frozen=True, slots=True)
class PageEnd:
    """How a page ended: done with its result line, or failed with an error code and message."""

    status: Literal["done", "failed"]
    line: bytes | None = None
    code: str | None = None
    message: str | None = None


def end_page(
    conn: Connection,
    job_id: str,
    seq: int,
    end: PageEnd,
    *,
    now: float,
    holder: str | None,
) -> bool:
    """End a page (done with its result line, or failed) and count it in its job, in `conn`'s
    transaction; False when the page is not `holder`'s running page. `holder` None ends a page
    nobody holds any more (its lease lapsed, or it was set back to pending).

    Raises:
        PageGone: the job is no longer running (cancelled or deleted meanwhile).
    """
    # The page row first (the lease holder's guard), then the job's: one lock order.
    if holder is None:
        guard = f"(status = 'pending' OR (status = 'running' AND lease_expires_at < {DB_NOW}))"
    else:
        guard = "status = 'running' AND lease_owner = %(holder)s"
    page = conn.execute(
        "UPDATE ocr_pages SET status = %(status)s, result = %(line)s, error_code = %(code)s,"
        " error_message = %(message)s, lease_expires_at = NULL"
        f" WHERE job_id = %(id)s AND seq = %(seq)s AND {guard}",
        {
            "status": end.status,
            "line": end.line,
            "code": end.code,
            "message": end.message,
            "id": job_id,
            "seq": seq,
            "now": now,
            "holder": holder,
        },
    )
    if page.rowcount == 0:
        return False
    failed = int(end.status == "failed")
    job = conn.execute(
        "UPDATE ocr_jobs SET pages_done = pages_done + %(done)s,"
        " pages_failed = pages_failed + %(failed)s,"
        " status = CASE WHEN pages_done + pages_failed + 1 < pages_total THEN status"
        "  WHEN pages_failed + %(failed)s = 0 THEN 'succeeded' ELSE 'failed' END,"
        " finished_at = CASE WHEN pages_done + pages_failed + 1 < pages_total"
        "  THEN finished_at ELSE %(now)s END"
        " WHERE id = %(id)s AND status = 'running'"
        " RETURNING pages_done + pages_failed AS finished",
        {"done": 1 - failed, "failed": failed, "now": now, "id": job_id},
    ).fetchone()
    if job is None:
        raise PageGone  # cancelled or deleted meanwhile: the page's update is rolled back
    conn.execute(
        "UPDATE ocr_pages SET finished_order = %s WHERE job_id = %s AND seq = %s",
        (job["finished"], job_id, seq),
    )
    return True
