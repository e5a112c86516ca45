"""The outbox: sends a job's deliveries from its store, its webhooks and the export of its
outputs, each retried with backoff until done or out of time (`serving.jobs.retries`).

The store queues them as jobs and documents end (`serving.jobs.store.deliveries`); the runner
wakes the outbox at every change, and the outbox otherwise sleeps until the next delivery is due
(or, on a store shared by replicas, every `jobs.poll_interval_s`). At most
`webhooks.max_concurrent` deliveries are in flight; each attempt is bounded in time
(`webhooks.timeout_s`, `storage.export_timeout_s`), so a slow or dead receiver costs a slot for
that long and nothing else. A receiver's answer never fails the job: its state is final before
any delivery starts. The exporter, which renders the job's documents, lives above the jobs
(`serving.http.job_export`) and is attached by the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from serving.config import AppConfig
from serving.errors import OcrError
from serving.jobs import webhooks
from serving.jobs.credentials import Credentials, CredentialStore
from serving.jobs.destinations import DestinationPolicy
from serving.jobs.retries import after_attempt
from serving.jobs.storage.errors import PERMANENT, StorageUnavailable
from serving.jobs.store import JobStore
from serving.jobs.store.deliveries import Attempt, Delivery, NewDelivery, end_delivery
from serving.jobs.store.types import JobInfo, JobNotFound
from serving.metrics import Metrics

logger = logging.getLogger(__name__)

IDLE_S = 60.0
"""The longest sleep with nothing due (a safety net: the runner wakes the outbox)."""
MIN_WAIT_S = 0.05
CLAIM_MARGIN_S = 30.0
"""A webhook's claim outlasts its attempt's timeout by this much."""


class Exporter(Protocol):
    """Writes an ended job's outputs where its hooks say (`serving.http.job_export`)."""

    async def __call__(self, info: JobInfo, credentials: Credentials) -> dict[str, Any]:
        """The export's report for the job's event (`location`, `objects`).

        Raises:
            OcrError: `StorageUnavailable` (or a 5xx): try again later; any other: no retry.
        """


def callback_policy(config: AppConfig) -> DestinationPolicy:
    """Where callbacks may point."""
    return DestinationPolicy(
        allowed_hosts=config.webhooks.allowed_hosts,
        allow_private=config.webhooks.allow_private_addresses,
        setting="webhooks.allowed_hosts",
    )


class Outbox:
    """Sends the deliveries of one store; `start()` and `stop()` come with the runner's."""

    def __init__(
        self,
        *,
        store: JobStore,
        config: AppConfig,
        credentials: CredentialStore,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.credentials = credentials
        self.exporter: Exporter | None = None
        """Set by the app before `start()`; without one, exports fail (`ocr-batch` has none)."""
        self._metrics = metrics
        self._clock = clock
        self._jitter = jitter
        self._transport = transport
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """Look for deliveries now (a job or a document ended)."""
        self._wake.set()

    async def start(self) -> None:
        """Start sending."""
        self._loop = asyncio.create_task(self._run(), name="jobs-outbox")

    async def stop(self) -> None:
        """Stop sending; attempts in flight are dropped and made again later (at least once)."""
        tasks = [t for t in (self._loop, *self._sending) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop = None

    async def _run(self) -> None:
        slots = asyncio.Semaphore(self.config.webhooks.max_concurrent)
        idle_s = self.store.poll_interval_s or IDLE_S
        while True:
            self._wake.clear()
            wait_s = idle_s
            if self.store.is_open:
                try:
                    wait_s = await self._pass(slots, idle_s)
                except OcrError as err:  # the database is unreachable: try again later
                    logger.warning("webhooks: cannot read the deliveries: %s", err.message)
                except Exception:  # the outbox's boundary: a store error must not end it
                    logger.exception("webhooks: cannot read the deliveries")
            with contextlib.suppress(TimeoutError):
                # Not wait_for: on Python 3.11 it can swallow a cancel that meets the event's set (a
                # test's outbox.stop() waited on a loop that went on).
                async with asyncio.timeout(max(wait_s, MIN_WAIT_S)):
                    await self._wake.wait()

    async def _pass(self, slots: asyncio.Semaphore, idle_s: float) -> float:
        """Queue what ended, start what is due while slots are free; returns how long to sleep."""
        queued = await asyncio.to_thread(self.store.enqueue_deliveries)
        if queued:
            logger.info("webhooks: %d deliveries queued", queued)
        while not slots.locked():
            delivery = await asyncio.to_thread(
                self.store.claim_delivery,
                webhook_lease_s=self.config.webhooks.timeout_s + CLAIM_MARGIN_S,
                export_lease_s=self.config.storage.export_timeout_s + CLAIM_MARGIN_S,
            )
            if delivery is None:
                break
            await slots.acquire()
            task = asyncio.create_task(self._send(delivery), name=f"delivery-{delivery.id}")
            self._sending.add(task)
            task.add_done_callback(functools.partial(self._sent, slots))
        if slots.locked():
            return idle_s  # a delivery ending wakes the loop
        due = await asyncio.to_thread(self.store.next_delivery_at)
        return idle_s if due is None else min(idle_s, due - self._clock())

    def _sent(self, slots: asyncio.Semaphore, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            logger.error("webhooks: delivery task failed: %r", task.exception())
        self.wake()

    async def _send(self, delivery: Delivery) -> None:
        at, started = self._clock(), time.monotonic()
        credentials = self.credentials.for_owner(delivery.owner)
        then: NewDelivery | None = None
        if delivery.kind == "export":
            result, info, report = await self._export(delivery, credentials)
        else:
            result, info, report = await self._call(delivery, credentials), None, None
        verdict = after_attempt(
            ok=result.ok,
            permanent=result.permanent,
            attempts=delivery.attempts,
            created_at=delivery.created_at,
            now=self._clock(),
            config=self.config.webhooks,
            retry_after_s=result.retry_after_s,
            jitter=self._jitter(),
        )
        if info is not None and not verdict.again:
            then = end_delivery(info, now=self._clock(), output=report, exported=True)
        attempt = Attempt(
            at=at,
            ok=result.ok,
            status_code=result.status_code,
            error=result.error,
            duration_ms=(time.monotonic() - started) * 1000,
        )
        outcome = "delivered" if result.ok else ("retried" if verdict.again else "failed")
        self._count(delivery.kind, outcome)
        try:
            await asyncio.to_thread(
                self.store.finish_attempt,
                delivery.id,
                attempt,
                next_at=verdict.next_at,
                then=then,
            )
        except OcrError as err:  # its claim lapses and another attempt is made: at least once
            logger.warning("webhooks: delivery %s not recorded: %s", delivery.id, err.message)
            return
        log = logger.info if result.ok else logger.warning
        log(
            "job %s %s %s: attempt %d %s%s",
            delivery.job_id,
            delivery.kind,
            delivery.event,
            delivery.attempts,
            outcome,
            "" if result.error is None else f" ({result.error})",
        )
        if then is not None:
            self.wake()

    async def _call(self, delivery: Delivery, credentials: Credentials) -> webhooks.SendResult:
        url = delivery.hooks.callback_url
        if url is None:
            return webhooks.SendResult(ok=False, permanent=True, error="the job has no callback")
        if credentials.webhook_secret is None:
            return webhooks.SendResult(
                ok=False,
                permanent=True,
                error="no signing secret is configured for the job's key (webhook_secret in "
                "auth.keys_file, or webhooks.secret_file)",
            )
        return await webhooks.send(
            url,
            delivery.id,
            delivery.body.encode(),
            secret=credentials.webhook_secret,
            policy=callback_policy(self.config),
            timeout_s=self.config.webhooks.timeout_s,
            transport=self._transport,
        )

    async def _export(
        self, delivery: Delivery, credentials: Credentials
    ) -> tuple[webhooks.SendResult, JobInfo | None, dict[str, Any] | None]:
        """One export attempt: its result, the job (None: deleted) and the report its webhook
        carries."""
        try:
            info = await asyncio.to_thread(self.store.get_job, delivery.job_id)
        except JobNotFound:
            return webhooks.SendResult(ok=False, permanent=True, error="job deleted"), None, None
        except OcrError as err:
            return webhooks.SendResult(ok=False, error=err.message), None, None
        if self.exporter is None:
            error = StorageUnavailable("this process exports no outputs")
            return webhooks.SendResult(ok=False, error=error.message), info, _failed(error)
        try:
            async with asyncio.timeout(self.config.storage.export_timeout_s):
                report = await self.exporter(info, credentials)
        except TimeoutError:
            error = StorageUnavailable(
                f"the export took longer than {self.config.storage.export_timeout_s:g} s "
                "(storage.export_timeout_s)"
            )
            return webhooks.SendResult(ok=False, error=error.message), info, _failed(error)
        except OcrError as err:
            permanent = isinstance(err, PERMANENT) or err.http_status < 500
            result = webhooks.SendResult(ok=False, permanent=permanent, error=err.message)
            return result, info, _failed(err)
        except Exception as err:  # the outbox's boundary: one job's export must not stop others
            logger.exception("job %s: export failed", delivery.job_id)
            internal = OcrError(f"Internal error ({type(err).__name__})")
            return webhooks.SendResult(ok=False, error=internal.message), info, _failed(internal)
        return webhooks.SendResult(ok=True), info, {"status": "succeeded", **report}

    def _count(self, kind: str, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.deliveries.labels(kind=kind, outcome=outcome).inc()


def _failed(error: OcrError) -> dict[str, Any]:
    return {"status": "failed", "error": {"code": error.code, "message": error.message}}
