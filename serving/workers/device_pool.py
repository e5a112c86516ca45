"""Device worker processes seen from the main process: start, supervise, and feed them batches.

One dispatch task per worker pulls the next batch sized for that worker from the scheduler, sends
it, and hands each item's outcome to its waiting request. A worker that dies is restarted; the
items it held are queued again once, then failed with 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from serving.config import StageLimits
from serving.errors import OcrError, WorkerUnavailable
from serving.metrics import Metrics
from serving.scheduling.batching import Scheduler, WorkItem
from serving.workers import shm
from serving.workers.device_worker import (
    DEVICE_FAULT_EXIT_CODE,
    DeviceSpec,
    ItemFailed,
    ItemOk,
    WorkerSetup,
    device_worker_main,
)
from serving.workers.proc import cancel_and_wait

logger = logging.getLogger(__name__)

_MP = multiprocessing.get_context("spawn")


class WorkerDied(Exception):
    """The device worker process exited while it held work."""


@dataclass(slots=True, eq=False)
class DeviceWorker:
    """Main-process handle of one device worker process."""

    spec: DeviceSpec
    limits: Mapping[str, StageLimits]
    setup: WorkerSetup
    start_timeout_s: float = 600.0
    inflight_batches: int = 1
    """Batches sent to the process at once (each runs after the one before)."""
    process: BaseProcess | None = None
    info: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    batches: int = 0
    _conn: Connection | None = None
    _pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    _ready: asyncio.Future[dict[str, Any]] | None = None
    _fault: str | None = None
    """The device fault the process said it exits on (it may not be reaped when the pipe closes)."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    restarting: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_done_at: float = 0.0
    """When the process last answered a batch: a batch's own time starts at its send or then."""

    @property
    def ready(self) -> bool:
        """Loaded, warmed up and alive."""
        return (
            self._ready is not None
            and self._ready.done()
            and not self._ready.exception()
            and self.process is not None
            and self.process.is_alive()
        )

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Spawn the process and wait until it has loaded its models and run a warm-up page."""
        loop = asyncio.get_running_loop()
        parent, child = _MP.Pipe()
        self._ready = loop.create_future()
        self.process = _MP.Process(
            target=device_worker_main,
            args=(self.spec, self.setup, child),
            name=f"ocr-device-{self.spec.name}",
            daemon=True,
        )
        # Spawning writes start-up data through a pipe: never on the event loop (see cpu_pool).
        await asyncio.to_thread(self.process.start)
        child.close()
        self._conn = parent
        loop.add_reader(parent.fileno(), self._on_message)
        loop.add_reader(self.process.sentinel, self._on_exit)
        try:
            self.info = await asyncio.wait_for(asyncio.shield(self._ready), self.start_timeout_s)
        except TimeoutError:
            await self._kill()
            raise
        logger.info("device worker %s up (pid %s)", self.spec.name, self.pid)

    async def execute(self, stage: str, refs: list[shm.ShmRef]) -> list[ItemOk | ItemFailed]:
        """Run one batch; raises WorkerDied if the process exits first."""
        if self._conn is None or not self.ready:
            raise WorkerDied(self.spec.name)
        batch_id = next(self._ids)
        future: asyncio.Future[list[ItemOk | ItemFailed]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[batch_id] = future
        try:
            self._conn.send(("run", batch_id, stage, refs))
        except (OSError, ValueError) as err:
            self._pending.pop(batch_id, None)
            raise WorkerDied(self.spec.name) from err
        outcomes = await future
        self.batches += 1
        return outcomes

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the process to exit; kill it if it does not."""
        if self.process is None:
            return
        if self._conn is not None and self.process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("stop",))
        await asyncio.to_thread(self.process.join, timeout_s)
        await self._kill()

    def _on_message(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            while conn.poll():
                message = conn.recv()
                self._dispatch(message)
        except (EOFError, OSError):
            self._on_exit()

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "done":
            future = self._pending.pop(message[1], None)
            if future is not None and not future.done():
                future.set_result(message[2])
        elif kind == "ready" and self._ready is not None and not self._ready.done():
            self._ready.set_result(message[1])
        elif kind == "fatal" and self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError(f"{self.spec.name}: {message[1]}"))
        elif kind == "fault":
            self._fault = str(message[1])

    def _on_exit(self) -> None:
        self._detach()
        exitcode = self.process.exitcode if self.process is not None else None
        if self._fault is not None or exitcode == DEVICE_FAULT_EXIT_CODE:
            logger.error(
                "device worker %s exited after a device fault (%s); its batches run again on "
                "a fresh process",
                self.spec.name,
                self._fault or "its log says which",
            )
            self._fault = None
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError(f"{self.spec.name} exited while starting"))
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(WorkerDied(self.spec.name))

    def _detach(self) -> None:
        loop = asyncio.get_running_loop()
        if self._conn is not None:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self._conn.fileno())
            self._conn.close()
            self._conn = None
        if self.process is not None:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self.process.sentinel)

    async def _kill(self) -> None:
        self._detach()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            await asyncio.to_thread(self.process.join, 5)


class WorkerHandle(Protocol):
    """What the dispatcher needs of a device worker: `DeviceWorker`, or a fake in unit tests."""

    spec: DeviceSpec
    limits: Mapping[str, StageLimits]
    inflight_batches: int
    info: dict[str, Any]
    """What the process reported when it became ready (warm-up, pid, precision and why)."""
    restarts: int
    restarting: asyncio.Lock
    last_done_at: float

    @property
    def ready(self) -> bool: ...

    @property
    def process(self) -> object | None:
        """The running process; a new object after each restart."""
        ...

    @property
    def pid(self) -> int | None: ...

    async def start(self) -> None: ...

    async def stop(self, timeout_s: float = 10.0) -> None: ...

    async def execute(self, stage: str, refs: list[Any]) -> list[ItemOk | ItemFailed]: ...


class DevicePool:
    """All device workers, their dispatch loops and supervision."""

    def __init__(
        self,
        workers: Sequence[WorkerHandle],
        scheduler: Scheduler,
        *,
        metrics: Metrics | None = None,
        restart_backoff_s: float = 1.0,
    ) -> None:
        self.workers = workers
        self.scheduler = scheduler
        self.metrics = metrics or Metrics()
        self._restart_backoff_s = restart_backoff_s
        for worker in workers:
            scheduler.placement.add_device(worker.spec.name, worker.spec.stages)
        self._tasks: list[asyncio.Task[None]] = []
        self.restarts = 0
        self.dispatch_failures = 0

    @property
    def ready(self) -> bool:
        """Every device worker is loaded, warmed up and alive."""
        return bool(self.workers) and all(w.ready for w in self.workers)

    async def start(self) -> None:
        """Start every worker (in parallel) and their dispatch loops."""
        await asyncio.gather(*(w.start() for w in self.workers))
        for worker in self.workers:
            for _ in range(worker.inflight_batches):
                self._tasks.append(
                    asyncio.create_task(self._serve_forever(worker), name=worker.spec.name)
                )

    async def _serve_forever(self, worker: WorkerHandle) -> None:
        """Feed `worker` until cancelled; a dispatch loop that fails is logged and started again,
        so no worker is ever left without a feeder."""
        while True:
            try:
                await self._serve(worker)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.dispatch_failures += 1
                logger.exception("dispatch to %s failed; restarting it", worker.spec.name)
                await asyncio.sleep(self._restart_backoff_s)

    async def stop(self) -> None:
        """Stop dispatching and stop the processes."""
        await cancel_and_wait(self._tasks)
        await asyncio.gather(*(w.stop() for w in self.workers))

    async def _serve(self, worker: WorkerHandle) -> None:
        limits = worker.limits
        name = worker.spec.name
        placement = self.scheduler.placement
        while True:
            batch = await self.scheduler.next_batch(worker.spec.stages, limits, device=name)
            stage = batch[0].stage
            cost = sum(item.cost for item in batch)
            started = time.monotonic()
            token = placement.started(name, stage, cost, started)
            self._observe_batch(worker, batch, started)
            seconds: float | None = None
            try:
                outcomes = await worker.execute(stage, [item.payload for item in batch])
                done = time.monotonic()
                seconds = done - max(started, worker.last_done_at)
                worker.last_done_at = done
            except WorkerDied:
                logger.error(
                    "device worker %s died holding a %s batch of %d",
                    worker.spec.name,
                    stage,
                    len(batch),
                )
                self._requeue(batch)
                await self._restart(worker)
                continue
            except asyncio.CancelledError:
                _fail(batch, WorkerUnavailable("The server is stopping"))
                raise
            except Exception:
                # The loop restarts (`_serve_forever`); the batch it held runs again, not dropped.
                self._requeue(batch)
                raise
            finally:
                placement.finished(name, token, stage, cost, seconds)
                self.scheduler.notify()  # this device frees: others may now leave work to it
            self.metrics.inference_seconds.labels(stage=stage, device=name).observe(
                time.monotonic() - started
            )
            if seconds is not None:
                self.metrics.observe_cost(name, stage, cost, seconds, placement.model)
            self._complete(batch, outcomes)

    def _observe_batch(self, worker: WorkerHandle, batch: list[WorkItem], now: float) -> None:
        stage = batch[0].stage
        rows = sum(item.count for item in batch)
        logger.debug(
            "batch device=%s stage=%s bucket=%s items=%d rows=%d",
            worker.spec.name,
            stage,
            batch[0].bucket,
            len(batch),
            rows,
        )
        self.metrics.batch_size.labels(stage=stage, device=worker.spec.name).observe(rows)
        pages = {item.page for item in batch if item.page is not None}
        if pages:
            self.metrics.batch_pages.labels(stage=stage, device=worker.spec.name).observe(
                len(pages)
            )
        wait = self.metrics.queue_wait_seconds.labels(stage=stage)
        for item in batch:
            wait.observe(max(0.0, now - item.enqueued_at))

    def _complete(self, batch: list[WorkItem], outcomes: list[ItemOk | ItemFailed]) -> None:
        if len(outcomes) != len(batch):
            error = OcrError(f"worker returned {len(outcomes)} results for {len(batch)} items")
            outcomes = [ItemFailed(error)] * len(batch)
        for item, outcome in zip(batch, outcomes, strict=True):
            discard_payload(item)
            if item.future.done():
                if isinstance(outcome, ItemOk) and isinstance(outcome.value, shm.ShmRef):
                    shm.discard(outcome.value)
                continue
            if isinstance(outcome, ItemOk):
                item.future.set_result(outcome.value)
            else:
                item.future.set_exception(outcome.error)

    def _requeue(self, batch: list[WorkItem]) -> None:
        # Workers never unlink their inputs, so a batch can run again elsewhere; once only.
        for item in batch:
            if item.future.done():
                discard_payload(item)
                continue
            item.attempts += 1
            if item.attempts > 1:
                discard_payload(item)
                item.future.set_exception(WorkerUnavailable())
                continue
            self.scheduler.submit(item, front=True)

    async def _restart(self, worker: WorkerHandle) -> None:
        # Each of a worker's dispatch loops sees it die; the first restarts it, the others wait.
        dead = worker.process
        async with worker.restarting:
            if worker.process is not dead and worker.ready:
                return
            self.restarts += 1
            worker.restarts += 1
            self.metrics.worker_restarts.labels(kind="device").inc()
            placement = self.scheduler.placement
            placement.set_available(worker.spec.name, False)  # others take its share meanwhile
            self.scheduler.notify()
            await worker.stop(timeout_s=1.0)
            while True:
                await asyncio.sleep(self._restart_backoff_s)
                try:
                    await worker.start()
                    placement.set_available(worker.spec.name, True)
                    return
                except (RuntimeError, TimeoutError, OSError):
                    logger.exception(
                        "restarting device worker %s failed; retrying", worker.spec.name
                    )


def discard_payload(item: WorkItem) -> None:
    if isinstance(item.payload, shm.ShmRef):
        shm.discard(item.payload)


def _fail(batch: list[WorkItem], error: OcrError) -> None:
    for item in batch:
        discard_payload(item)
        if not item.future.done():
            item.future.set_exception(error)
