"""The job runner: feeds job pages, each its own unit of work, to OCR at background priority.

A feed task claims pending pages from the store while fewer than `jobs.max_inflight_pages` are in
flight (all jobs together), and runs each in its own task; a page's result is committed once. A
page refused for overload (interactive work comes first) goes back to pending and waits its turn
for as long as that lasts; one that met another passing condition (a worker restart, a deadline)
is tried again up to `MAX_ATTEMPTS` times. A second task fails jobs left queued past
`jobs.queued_expiry_s` and deletes finished jobs past `jobs.retention_s`. On a store shared by
replicas (PostgreSQL) the feed also looks for work every `jobs.poll_interval_s` (other replicas
queue jobs and leave pages), and a third task renews the leases of the pages in flight, stopping
those the store says this server no longer holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pipelines.types import PageResult
from serving.config import JobsConfig
from serving.errors import OcrError, Overloaded
from serving.jobs.files import Document
from serving.jobs.follow import watch_shared_store
from serving.jobs.hooks import JobHooks
from serving.jobs.options import page_record
from serving.jobs.outbox import Outbox
from serving.jobs.store import JobStore
from serving.jobs.store.types import (
    STATUSES,
    JobInfo,
    JobNotFound,
    JobStatus,
    PageTask,
    StoredLimits,
)
from serving.metrics import Metrics

logger = logging.getLogger(__name__)

PageOcr = Callable[[PageTask], Awaitable[PageResult]]
"""OCRs one claimed page."""

MAX_ATTEMPTS = 4
"""Tries of one page when it meets a passing condition (503 or 504) other than overload."""
RETRY_BACKOFF_S = 1.0
"""Wait before a page goes back to pending after a passing condition; doubles each attempt."""
STORE_RETRY_S = 5.0
"""Wait before claiming again after the store could not be reached (a shared store's database)."""


class JobEvents:
    """Wakes the followers of a job (result streams) when one of its pages ends or it changes."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def watch(self, job_id: str) -> asyncio.Event:
        """An event set at the job's next change: take it before reading, then wait on it."""
        event = self._events.get(job_id)
        if event is None:
            event = self._events[job_id] = asyncio.Event()
        return event

    def watched(self) -> list[str]:
        """The jobs someone waits on now."""
        return list(self._events)

    def notify(self, job_id: str) -> None:
        """Wake everyone watching `job_id`."""
        event = self._events.pop(job_id, None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        """Wake every follower (shutdown)."""
        for event in self._events.values():
            event.set()
        self._events.clear()


class JobRunner:
    """Runs the jobs of one store; `start()` and `stop()` come from the runtime's lifecycle."""

    def __init__(
        self,
        *,
        store: JobStore,
        ocr: PageOcr,
        config: JobsConfig,
        metrics: Metrics | None = None,
        sweep_interval_s: float | None = None,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        outbox: Outbox | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox
        """Sends the jobs' webhooks and exports; woken at every change of a job."""
        self.config = config
        self.events = JobEvents()
        self._ocr = ocr
        self._metrics = metrics
        self._sweep_interval_s = sweep_interval_s or min(
            max(min(config.retention_s, config.queued_expiry_s) / 10, 1.0), 600.0
        )
        self._retry_backoff_s = retry_backoff_s
        self._wake = asyncio.Event()
        self._open_lock = asyncio.Lock()
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._loops: list[asyncio.Task[None]] = []

    # --- lifecycle ----------------------------------------------------------------------------

    async def open(self, *, create: bool = True) -> bool:
        """Open the store (creating it only when `create`), resetting pages left running.

        Servers that never get a job never create a data directory. Returns False when there is no
        store and `create` is False.

        Raises:
            JobStoreUnavailable: the store is locked by another process or cannot be read.
        """
        if self.store.is_open:
            return True
        async with self._open_lock:
            if self.store.is_open:
                return True
            if not create and not self.store.exists:
                return False
            reset = await asyncio.to_thread(self.store.open)
            logger.info(
                "job store open at %s; %d pages left running set back to pending",
                self.store.location,
                reset,
            )
            self._wake.set()
        await self._refresh_metrics()
        return True

    async def start(self) -> None:
        """Open an existing store, so its unfinished jobs resume, and start feeding pages."""
        try:
            await self.open(create=False)
        except OcrError as err:
            logger.error("jobs: %s; the jobs API answers 503 until this is fixed", err.message)
        self._loops = [
            asyncio.create_task(self._feed(), name="jobs-feed"),
            asyncio.create_task(self._sweep(), name="jobs-retention"),
        ]
        if self.store.lease_s is not None:
            self._loops.append(asyncio.create_task(self._renew(), name="jobs-leases"))
        if self.outbox is not None:
            await self.outbox.start()
        if self.store.poll_interval_s is not None:  # other replicas finish pages unseen here
            watch = watch_shared_store(self.store, self.events, self.store.poll_interval_s)
            self._loops.append(asyncio.create_task(watch, name="jobs-followed"))

    async def stop(self) -> None:
        """Cancel pages in flight (they go back to pending) and close the store."""
        if self.outbox is not None:
            await self.outbox.stop()
        pages = list(self._tasks)
        for task in [*self._loops, *self._tasks.values()]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._tasks.values(), return_exceptions=True)
        self._loops = []
        if self.store.is_open:
            for job_id, seq in pages:
                with contextlib.suppress(OcrError):  # unreachable: its lease lapses instead
                    await asyncio.to_thread(self.store.release_page, job_id, seq, refund=True)
            await asyncio.to_thread(self.store.close)
        self.events.notify_all()

    # --- the API's operations -----------------------------------------------------------------

    async def submit(
        self,
        job_id: str,
        documents: list[Document],
        options: dict[str, Any],
        *,
        owner: str | None = None,
        limits: StoredLimits | None = None,
        hooks: JobHooks | None = None,
    ) -> JobInfo:
        """Record a job whose documents are staged under `store.job_dir(job_id)`; it is queued,
        owned by the API key `owner` (None: authentication is off), within the owner's `limits`,
        with its `hooks` (a callback, an export) carried out by the outbox when it ends.

        Raises:
            StoredQuotaExceeded: the job would take its owner past `limits` (nothing recorded).
        """
        info = await asyncio.to_thread(
            self.store.create_job,
            job_id,
            documents,
            options,
            owner=owner,
            limits=limits,
            hooks=hooks,
        )
        logger.info("job %s queued: %d files, %d pages", job_id, len(documents), info.pages_total)
        self._wake.set()
        await self._refresh_metrics()
        return info

    async def get(self, job_id: str) -> JobInfo:
        """The job's state.

        Raises:
            JobNotFound: no such job.
        """
        if not await self.open(create=False):
            raise JobNotFound(f"No job {job_id}")
        return await asyncio.to_thread(self.store.get_job, job_id)

    async def list(
        self, *, status: JobStatus | None, limit: int, owner: str | None = None
    ) -> list[JobInfo]:
        """Jobs, newest first; with `owner`, only that key's."""
        if not await self.open(create=False):
            return []
        return await asyncio.to_thread(
            self.store.list_jobs, status=status, limit=limit, owner=owner
        )

    async def cancel(self, job_id: str) -> JobInfo:
        """Cancel a queued or running job; its pages in flight are dropped."""
        await self.get(job_id)
        info = await asyncio.to_thread(self.store.cancel_job, job_id)
        self._drop_pages(job_id)
        logger.info("job %s cancelled (%s)", job_id, info.status)
        await self._changed(job_id)
        return info

    async def delete(self, job_id: str) -> None:
        """Cancel a job and delete it with its files and results."""
        await self.get(job_id)
        await asyncio.to_thread(self.store.delete_job, job_id)
        self._drop_pages(job_id)
        logger.info("job %s deleted", job_id)
        await self._changed(job_id)

    # --- internals ----------------------------------------------------------------------------

    async def _feed(self) -> None:
        slots = asyncio.Semaphore(self.config.max_inflight_pages)
        while True:
            await slots.acquire()
            self._wake.clear()
            wait_s = self.store.poll_interval_s  # a shared store changes unseen: look again
            try:
                if not self.store.is_open and self.store.poll_interval_s is not None:
                    await self.open(create=False)  # a shared store unreachable until now
                task = (
                    await asyncio.to_thread(self.store.claim_next) if self.store.is_open else None
                )
            except OcrError as err:  # the database is unreachable: no traceback, every few s
                logger.warning("jobs: cannot claim a page: %s", err.message)
                task, wait_s = None, STORE_RETRY_S
            except Exception:  # the runner's boundary: a store error must not end the feed
                logger.exception("jobs: cannot claim a page")
                task = None
            if task is None:
                slots.release()
                with contextlib.suppress(TimeoutError):
                    # Not wait_for: on Python 3.11 it can swallow a cancel that meets the
                    # event's set (a test's outbox.stop() waited on a loop that went on).
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
                continue
            key = (task.job_id, task.seq)
            page = asyncio.create_task(self._run_page(task), name=f"job-{task.job_id}-{task.seq}")
            self._tasks[key] = page
            page.add_done_callback(functools.partial(self._page_ended, key, slots))

    async def _renew(self) -> None:
        """Renew the leases of the pages in flight; stop those lost (taken over, job ended)."""
        interval_s = (self.store.lease_s or 0.0) / 3
        while True:
            await asyncio.sleep(interval_s)
            if not self.store.is_open or not self._tasks:
                continue
            try:
                lost = await asyncio.to_thread(self.store.renew_leases, list(self._tasks))
            except Exception:  # the runner's boundary: try again at the next renewal
                logger.exception("jobs: cannot renew page leases")
                continue
            for key in lost:
                task = self._tasks.get(key)
                if task is not None and not task.done():
                    logger.warning("job %s page %d: lease lost; dropping the page", *key)
                    task.cancel()

    def _page_ended(
        self, key: tuple[str, int], slots: asyncio.Semaphore, task: asyncio.Task[None]
    ) -> None:
        self._tasks.pop(key, None)
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            logger.error("job %s page %d: %r", key[0], key[1], task.exception())

    async def _run_page(self, task: PageTask) -> None:
        try:
            result = await self._ocr(task)
            record = page_record(task.file_name, task.page, result, file_index=task.file_index)
            line = json.dumps(record, ensure_ascii=False).encode()
            committed = await asyncio.to_thread(
                self.store.complete_page, task.job_id, task.seq, line
            )
        except Overloaded:
            await self._again(task, self._retry_backoff_s, refund=True)
            return
        except OcrError as err:
            if err.http_status in (503, 504) and task.attempts < MAX_ATTEMPTS:
                logger.warning(
                    "job %s page %d: %s; trying again", task.job_id, task.seq, err.message
                )
                await self._again(task, self._retry_backoff_s * 2 ** (task.attempts - 1))
                return
            committed = await self._fail(task, err.code, err.message)
        except Exception:  # the runner's boundary: one page's failure must not stop the job
            logger.exception("job %s page %d failed", task.job_id, task.seq)
            committed = await self._fail(task, "internal", "Internal error")
        if committed:
            if self._metrics is not None:
                self._metrics.pages.inc()
            await self._changed(task.job_id)

    async def _again(self, task: PageTask, wait_s: float, *, refund: bool = False) -> None:
        await asyncio.sleep(wait_s)
        await asyncio.to_thread(self.store.release_page, task.job_id, task.seq, refund=refund)
        self._wake.set()

    async def _fail(self, task: PageTask, code: str, message: str) -> bool:
        logger.info("job %s page %d failed: %s", task.job_id, task.seq, message)
        return await asyncio.to_thread(self.store.fail_page, task.job_id, task.seq, code, message)

    def _drop_pages(self, job_id: str) -> None:
        for (owner, _seq), task in list(self._tasks.items()):
            if owner == job_id:
                task.cancel()

    async def _changed(self, job_id: str) -> None:
        self.events.notify(job_id)
        if self.outbox is not None:
            self.outbox.wake()
        await self._refresh_metrics()

    async def _sweep(self) -> None:
        while True:
            if self.store.is_open:
                try:
                    expired = await asyncio.to_thread(
                        self.store.expire_queued, self.config.queued_expiry_s
                    )
                    deleted = await asyncio.to_thread(
                        self.store.purge_expired, self.config.retention_s
                    )
                except Exception:  # the runner's boundary: retry at the next sweep
                    logger.exception("jobs: retention sweep failed")
                    expired, deleted = [], []
                for job_id in expired:
                    logger.info("job %s expired in the queue (jobs.queued_expiry_s)", job_id)
                    self.events.notify(job_id)
                if expired and self.outbox is not None:
                    self.outbox.wake()
                for job_id in deleted:
                    self.events.notify(job_id)
                if deleted:
                    logger.info("jobs: deleted %d jobs past retention", len(deleted))
                if deleted or expired:
                    await self._refresh_metrics()
            await asyncio.sleep(self._sweep_interval_s)

    async def _refresh_metrics(self) -> None:
        if self._metrics is None or not self.store.is_open:
            return
        try:
            counts = await asyncio.to_thread(self.store.counts)
        except OcrError:
            return  # closed meanwhile
        for status in STATUSES:
            self._metrics.jobs.labels(status=status).set(counts[status])
