"""A job's deliveries, kept in its store until done: the webhooks its end (and its documents')
sends and the export of its outputs (`serving.jobs.hooks`), each retried by the outbox
(`serving.jobs.outbox`) until it succeeds or its time is up, surviving restarts.

A job that asked for hooks is marked (`hooks_pending`, and `notify` on its files for document
events) when submitted; `enqueue` turns each ended document and each ended job into delivery rows
and clears its mark in the same transaction, so an event is queued exactly once, whoever ends the
job (a page, a cancel, the expiry sweep) and whichever replica looks. A job that exports gets an
`export` row first; the outbox queues its webhook once the export is over (`finish(...,
then=...)`). `claim` takes a due row for a while (`claimed_until`), skipping rows another replica
holds, so one process sends it at a time; a process that dies leaves the claim to lapse and the
row is sent again: at least once. The statements are written once for both dialects
(`serving.jobs.store.queries.Dialect`); `DeliveryStore` gives both stores the methods.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from serving.jobs.events import document_event, job_event
from serving.jobs.hooks import JobHooks
from serving.jobs.store.queries import Database, Dialect, read_job
from serving.jobs.store.types import JobInfo, iso_time

T = TypeVar("T")

DeliveryKind = Literal["webhook", "export"]
DeliveryStatus = Literal["pending", "delivered", "failed"]
LOG_ATTEMPTS = 20
"""Attempts kept on a delivery (the last ones), as `GET /v1/jobs/{id}` shows them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewDelivery:
    """A delivery to queue: a webhook with its JSON payload, or an export (payload `{}`)."""

    job_id: str
    kind: DeliveryKind
    event: str
    body: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """A claimed delivery, with what sending it needs of its job."""

    id: str
    """Its `webhook-id`: the same at every attempt."""
    job_id: str
    kind: DeliveryKind
    event: str
    body: str
    attempts: int
    """Including this one."""
    created_at: float
    owner: str | None
    hooks: JobHooks
    """What its job asked for (the callback's URL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """How one attempt went."""

    at: float
    ok: bool
    status_code: int | None = None
    error: str | None = None
    duration_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Its entry in the delivery's log."""
        return {
            "at": iso_time(self.at),
            "ok": self.ok,
            "status_code": self.status_code,
            "error": self.error,
            "duration_ms": round(self.duration_ms, 1),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryInfo:
    """A delivery as `GET /v1/jobs/{id}` shows it."""

    id: str
    kind: DeliveryKind
    event: str
    status: DeliveryStatus
    attempts: int
    created_at: float
    next_at: float | None
    finished_at: float | None
    last_error: str | None
    log: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        """Its entry in the job's `deliveries`."""
        return {
            "id": self.id,
            "kind": self.kind,
            "event": self.event,
            "status": self.status,
            "attempts": self.attempts,
            "created_at": iso_time(self.created_at),
            "next_attempt_at": iso_time(self.next_at) if self.status == "pending" else None,
            "finished_at": iso_time(self.finished_at),
            "last_error": self.last_error,
            "log": list(self.log),
        }


def new_id() -> str:
    """A delivery's id: `msg_`, the time in nanoseconds (ids sort in the order they were made,
    as a job's are listed) and 16 random hex digits; no `.`, as the signature scheme asks."""
    return f"msg_{time.time_ns():016x}{uuid.uuid4().hex[:16]}"


def insert(db: Database, sql: Dialect, new: NewDelivery, *, now: float) -> str:
    """Queue `new`, due now; returns its id."""
    p = sql.param
    delivery_id = new_id()
    db.execute(
        f"INSERT INTO {sql.deliveries} (id, job_id, kind, event, body, created_at, next_at)"
        f" VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p})",
        (delivery_id, new.job_id, new.kind, new.event, new.body, now, now),
    )
    return delivery_id


def enqueue(db: Database, sql: Dialect, *, now: float) -> int:
    """Queue the deliveries of the documents and jobs that ended since the last call, in
    `db`'s transaction; returns how many were queued. Documents first: a job's last document
    is told before (or with) the job."""
    p = sql.param
    queued = 0
    ended_files = list(
        db.execute(
            f"SELECT f.job_id, f.idx FROM {sql.files} f WHERE f.notify = 1 AND f.pages ="
            f" (SELECT COUNT(*) FROM {sql.pages} p WHERE p.job_id = f.job_id"
            "  AND p.file_idx = f.idx AND p.status IN ('done', 'failed'))"
            f" ORDER BY f.job_id, f.idx{sql.skip_locked}",
            (),
        )
    )
    for row in ended_files:
        job_id, index = row["job_id"], row["idx"]
        taken = db.execute(
            f"UPDATE {sql.files} SET notify = 0 WHERE job_id = {p} AND idx = {p} AND notify = 1",
            (job_id, index),
        ).rowcount
        if taken != 1:
            continue
        info = read_job(db, sql, job_id, detail=True)
        done, failed = _document_counts(db, sql, job_id, index)
        body = document_event(info, info.files[index], done=done, failed=failed, at=now)
        insert(
            db,
            sql,
            NewDelivery(job_id=job_id, kind="webhook", event=body["type"], body=json.dumps(body)),
            now=now,
        )
        queued += 1
    ended_jobs = list(
        db.execute(
            f"SELECT id FROM {sql.jobs} WHERE hooks_pending = 1"
            f" AND status IN ('succeeded', 'failed', 'cancelled') ORDER BY id{sql.skip_locked}",
            (),
        )
    )
    for row in ended_jobs:
        taken = db.execute(
            f"UPDATE {sql.jobs} SET hooks_pending = 0 WHERE id = {p} AND hooks_pending = 1",
            (row["id"],),
        ).rowcount
        if taken != 1:
            continue
        db.execute(f"UPDATE {sql.files} SET notify = 0 WHERE job_id = {p}", (row["id"],))
        info = read_job(db, sql, row["id"], detail=False)
        new = end_delivery(info, now=now)
        if new is not None:
            insert(db, sql, new, now=now)
            queued += 1
    return queued


def end_delivery(
    info: JobInfo, *, now: float, output: dict[str, Any] | None = None, exported: bool = False
) -> NewDelivery | None:
    """What an ended job queues: its export first (unless `exported`), else its webhook (with
    the export's report `output`), else nothing."""
    if info.hooks.exports and not exported:
        return NewDelivery(job_id=info.id, kind="export", event="export", body="{}")
    if not info.hooks.calls("job"):
        return None
    body = job_event(info, at=now, output=output)
    return NewDelivery(job_id=info.id, kind="webhook", event=body["type"], body=json.dumps(body))


def claim(
    db: Database, sql: Dialect, *, now: float, webhook_lease_s: float, export_lease_s: float
) -> Delivery | None:
    """Take the delivery due first (pending, due, not held by another process) for the lease
    its kind gets, counting an attempt; None when none is due."""
    p = sql.param
    row = db.execute(
        "SELECT d.id, d.job_id, d.kind, d.event, d.body, d.attempts, d.created_at, j.owner,"
        " j.hooks"
        f" FROM {sql.deliveries} d JOIN {sql.jobs} j ON j.id = d.job_id"
        f" WHERE d.status = 'pending' AND d.next_at <= {p}"
        f" AND (d.claimed_until IS NULL OR d.claimed_until < {p})"
        f" ORDER BY d.next_at, d.created_at LIMIT 1"
        f"{sql.skip_locked.replace('UPDATE', 'UPDATE OF d')}",
        (now, now),
    ).fetchone()
    if row is None:
        return None
    lease_s = export_lease_s if row["kind"] == "export" else webhook_lease_s
    db.execute(
        f"UPDATE {sql.deliveries} SET attempts = attempts + 1, claimed_until = {p} WHERE id = {p}",
        (now + lease_s, row["id"]),
    )
    return Delivery(
        id=row["id"],
        job_id=row["job_id"],
        kind=row["kind"],
        event=row["event"],
        body=row["body"],
        attempts=int(row["attempts"]) + 1,
        created_at=float(row["created_at"]),
        owner=row["owner"],
        hooks=JobHooks.from_json(json.loads(row["hooks"]) if row["hooks"] else None),
    )


def finish(
    db: Database,
    sql: Dialect,
    delivery_id: str,
    attempt: Attempt,
    *,
    next_at: float | None,
    then: NewDelivery | None = None,
) -> bool:
    """Record `attempt` on a claimed delivery: due again at `next_at`, else over (delivered when
    the attempt succeeded, else failed), queueing `then` once it is over; False when the
    delivery is gone (its job was deleted) or already over."""
    p = sql.param
    row = db.execute(
        f"SELECT log FROM {sql.deliveries} WHERE id = {p} AND status = 'pending'",
        (delivery_id,),
    ).fetchone()
    if row is None:
        return False
    log = [*json.loads(row["log"]), attempt.to_json()][-LOG_ATTEMPTS:]
    status: DeliveryStatus = (
        "pending" if next_at is not None else ("delivered" if attempt.ok else "failed")
    )
    db.execute(
        f"UPDATE {sql.deliveries} SET status = {p}, next_at = {p}, claimed_until = NULL,"
        f" finished_at = {p}, last_error = {p}, log = {p} WHERE id = {p}",
        (
            status,
            next_at if next_at is not None else attempt.at,
            None if status == "pending" else attempt.at,
            attempt.error,
            json.dumps(log),
            delivery_id,
        ),
    )
    if then is not None and status != "pending":
        insert(db, sql, then, now=attempt.at)
    return True


def next_due(db: Database, sql: Dialect) -> float | None:
    """When the next pending delivery may be claimed (due, and its claim lapsed); None: none
    is pending."""
    row = db.execute(
        "SELECT MIN(CASE WHEN claimed_until IS NOT NULL AND claimed_until > next_at"
        f" THEN claimed_until ELSE next_at END) AS due FROM {sql.deliveries}"
        " WHERE status = 'pending'",
        (),
    ).fetchone()
    return None if row is None or row["due"] is None else float(row["due"])


def of_job(db: Database, sql: Dialect, job_id: str) -> list[DeliveryInfo]:
    """The job's deliveries, oldest first."""
    rows = db.execute(
        f"SELECT * FROM {sql.deliveries} WHERE job_id = {sql.param} ORDER BY created_at, id",
        (job_id,),
    )
    return [
        DeliveryInfo(
            id=row["id"],
            kind=row["kind"],
            event=row["event"],
            status=row["status"],
            attempts=int(row["attempts"]),
            created_at=float(row["created_at"]),
            next_at=float(row["next_at"]),
            finished_at=row["finished_at"],
            last_error=row["last_error"],
            log=tuple(json.loads(row["log"])),
        )
        for row in rows
    ]


def delete_of_job(db: Database, sql: Dialect, job_id: str) -> None:
    """Drop a deleted job's deliveries (they would name a job that is gone)."""
    db.execute(f"DELETE FROM {sql.deliveries} WHERE job_id = {sql.param}", (job_id,))


def _document_counts(db: Database, sql: Dialect, job_id: str, index: int) -> tuple[int, int]:
    p = sql.param
    row = db.execute(
        f"SELECT COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0) AS done,"
        f" COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) AS failed"
        f" FROM {sql.pages} WHERE job_id = {p} AND file_idx = {p}",
        (job_id, index),
    ).fetchone()
    return int(row["done"]), int(row["failed"])


class DeliveryStore:
    """The deliveries' methods of a `JobStore`, over the store's own transaction (`_tx`)."""

    _dialect: Dialect
    _clock: Callable[[], float]

    def _tx(self, work: Callable[[Database], T]) -> T:
        """Run `work` in one transaction of the store (each store defines it)."""
        raise NotImplementedError

    def enqueue_deliveries(self) -> int:
        """Queue the deliveries of the documents and jobs that ended; returns how many."""
        now = self._clock()
        return self._tx(lambda db: enqueue(db, self._dialect, now=now))

    def claim_delivery(self, *, webhook_lease_s: float, export_lease_s: float) -> Delivery | None:
        """Take the delivery due first for a while (no other process sends it meanwhile)."""
        now = self._clock()
        return self._tx(
            lambda db: claim(
                db,
                self._dialect,
                now=now,
                webhook_lease_s=webhook_lease_s,
                export_lease_s=export_lease_s,
            )
        )

    def finish_attempt(
        self,
        delivery_id: str,
        attempt: Attempt,
        *,
        next_at: float | None,
        then: NewDelivery | None = None,
    ) -> bool:
        """Record an attempt: due again at `next_at`, or over (then `then` is queued)."""
        return self._tx(
            lambda db: finish(db, self._dialect, delivery_id, attempt, next_at=next_at, then=then)
        )

    def next_delivery_at(self) -> float | None:
        """When the next pending delivery is due; None: none is pending."""
        return self._tx(lambda db: next_due(db, self._dialect))

    def deliveries(self, job_id: str) -> list[DeliveryInfo]:
        """The job's deliveries, oldest first."""
        return self._tx(lambda db: of_job(db, self._dialect, job_id))
