"""Device worker processes seen from the main process: start, supervise, and feed them batches.

Each worker is a supervised process (`serving.workers.supervisor`) with `inflight_batches` +
`queued_batches` dispatch tasks: each pulls the next batch sized for that worker from the
scheduler, sends it, and hands each item's outcome to its waiting request. A worker that dies is
restarted; the items it held are queued again once, then failed with 503 (the pool's
`RetryPolicy`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, NamedTuple, Protocol

from serving import tracing
from serving.config import StageLimits
from serving.errors import OcrError, WorkerUnavailable
from serving.metrics import Metrics
from serving.proc import cancel_and_wait
from serving.scheduling.batching import Scheduler, WorkItem
from serving.workers import shm
from serving.workers.device_worker import (
    DEVICE_FAULT_EXIT_CODE,
    LONE_THREADS_KEY,
    BatchCpu,
    DeviceSpec,
    ItemFailed,
    ItemOk,
    WorkerSetup,
    device_worker_main,
)
from serving.workers.supervisor import RetryPolicy, WorkerDied, WorkerProcess, free_segments

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 2
"""Runs of one batch item whose worker died, the first included: it is queued again once."""


class BatchAnswer(NamedTuple):
    """A device worker's answer to one batch."""

    outcomes: list[ItemOk | ItemFailed]
    """One per item, in order."""
    cpu: BatchCpu | None = None
    """The worker's CPU time for it and since its answer before; None where not measured."""


@dataclass(slots=True, eq=False)
class DeviceWorkerHandle:
    """The main process's handle of one device worker process (the process itself runs
    `serving.workers.device_worker.DeviceWorkerChild`); a restart starts a new process."""

    spec: DeviceSpec
    limits: Mapping[str, StageLimits]
    setup: WorkerSetup
    environ: Callable[[], Mapping[str, str]] | None = None
    """The environment each process is spawned with, asked at each start
    (`serving.workers.sandbox.device_environ`); None = ours."""
    start_timeout_s: float = 600.0
    info: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    batches: int = 0
    restarting: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_done_at: float = 0.0
    """When the process last answered a batch: a batch's own time starts at its send or then."""
    _child: WorkerProcess | None = None
    _fault: str | None = None
    """The device fault the process said it exits on (it may not be reaped when the pipe closes)."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def inflight_batches(self) -> int:
        """Batches sent to the process at once, as many as it holds launched
        (`EngineOptions.inflight_batches`, from `workers.<kind>.inflight_batches`)."""
        return self.spec.engine.options.inflight_batches

    @property
    def ready(self) -> bool:
        """Loaded, warmed up and alive."""
        return self._child is not None and self._child.ready

    @property
    def process(self) -> BaseProcess | None:
        """The current process; a new object after each restart."""
        return self._child.process if self._child is not None else None

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self._child.pid if self._child is not None else None

    async def start(self) -> None:
        """Spawn the process and wait until it has loaded its models and run a warm-up page.

        Raises:
            WorkerStartFailed: it could not load or warm up, or exited first.
            TimeoutError: it was not ready within `start_timeout_s`.
        """
        self._fault = None
        self._child = WorkerProcess(
            functools.partial(device_worker_main, self.spec, self.setup),
            name=f"ocr-device-{self.spec.name}",
            replies=("done",),
            on_notice=self._on_notice,
            on_exit=self._on_exit,
            on_orphan=_free_outcomes,
            environ=None if self.environ is None else self.environ(),
        )
        self.info = await self._child.start(self.start_timeout_s)
        logger.info("device worker %s up (pid %s)", self.spec.name, self.pid)

    async def execute(self, stage: str, refs: list[Any], *, alone: bool = False) -> BatchAnswer:
        """Run one batch (`alone`: on the threads for that, `DevicePool.alone`); raises
        WorkerDied if the process exits first."""
        child = self._child
        if child is None or not self.ready:
            raise WorkerDied(self.spec.name)
        batch_id = next(self._ids)
        _, done_id, outcomes, cpu = await child.request(("run", batch_id, stage, refs, alone))
        if done_id != batch_id:  # the process answers in order: this cannot happen
            raise OcrError(f"{self.spec.name} answered batch {done_id} for {batch_id}")
        self.batches += 1
        return BatchAnswer(outcomes, cpu)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the process to exit; kill it if it does not."""
        if self._child is not None:
            await self._child.stop(("stop",), timeout_s)

    def _on_notice(self, message: tuple[Any, ...]) -> None:
        if message[0] == "fault":
            self._fault = str(message[1])

    def _on_exit(self) -> None:
        exitcode = self._child.exitcode if self._child is not None else None
        if self._fault is not None or exitcode == DEVICE_FAULT_EXIT_CODE:
            logger.error(
                "device worker %s exited after a device fault (%s); its batches run again on "
                "a fresh process",
                self.spec.name,
                self._fault or "its log says which",
            )
            self._fault = None


def _free_outcomes(reply: tuple[Any, ...]) -> None:
    """Free the outputs of a batch that came back after its dispatcher stopped waiting."""
    for outcome in reply[2]:
        if isinstance(outcome, ItemOk):
            free_segments(outcome.value)


class WorkerHandle(Protocol):
    """What the dispatcher needs of a device worker: `DeviceWorkerHandle`, or a fake in unit
    tests."""

    spec: DeviceSpec
    limits: Mapping[str, StageLimits]
    info: dict[str, Any]
    """What the process reported when it became ready (warm-up, pid, precision and why)."""
    restarts: int
    restarting: asyncio.Lock
    last_done_at: float

    @property
    def inflight_batches(self) -> int:
        """Dispatch tasks that feed it: batches it holds at once."""
        ...

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

    async def execute(self, stage: str, refs: list[Any], *, alone: bool = False) -> BatchAnswer: ...


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
        self.retry = RetryPolicy(max_attempts=MAX_ATTEMPTS, restart_backoff_s=restart_backoff_s)
        for worker in workers:
            scheduler.placement.add_device(worker.spec.name, worker.spec.stages)
        self._peers = {
            worker.spec.name: tuple(
                other.spec.name
                for other in workers
                if other.spec.device == worker.spec.device and other is not worker
            )
            for worker in workers
        }
        """Each worker's fellows: the other workers of its device."""
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
            # One task a batch it holds: those it runs, and those queued for when one ends.
            for _ in range(worker.inflight_batches + worker.spec.queued_batches):
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
                await asyncio.sleep(self.retry.restart_backoff_s)

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
            alone = self.alone(worker)
            token = placement.started(name, stage, cost, started)
            self._observe_batch(worker, batch, started, alone=alone)
            seconds: float | None = None
            try:
                with tracing.batch_span(
                    "device.batch", batch, started, **{"ocr.stage": stage, "ocr.device": name}
                ):
                    answer = await worker.execute(
                        stage, [item.payload for item in batch], alone=alone
                    )
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
            if answer.cpu is not None:
                self.metrics.observe_device_cpu(
                    name, stage, answer.cpu.batch_s, answer.cpu.between_s
                )
            self._complete(batch, answer.outcomes)

    def alone(self, worker: WorkerHandle) -> bool:
        """Whether the batch `worker` has just taken runs alone, on all the threads of its
        device (`engine.cpu_lone_threads`): the other workers of the device hold no batch,
        nothing else is queued for them or for it, and no other page is in flight. A lone page
        then uses the whole machine (its detector; its recognition chunks spread over the
        workers instead). Work that comes meanwhile runs beside it, the cores shared for that
        while: with other pages in flight (in their CPU steps, soon back) that was most lone
        batches under load, each on more threads than cores for part of its time (issue 46:
        c=4 read 0.553 pages/s without lone batches against 0.500 with them)."""
        if not worker.info.get(LONE_THREADS_KEY):  # it said it runs none alone
            return False
        if self.scheduler.company_possible():
            return False
        placement = self.scheduler.placement
        if not placement.idle((worker.spec.name, *self._peers[worker.spec.name])):
            return False
        return not any(self.scheduler.policy.depth(stage) for stage in worker.spec.stages)

    def _observe_batch(
        self, worker: WorkerHandle, batch: list[WorkItem], now: float, *, alone: bool = False
    ) -> None:
        stage = batch[0].stage
        rows = sum(item.count for item in batch)
        logger.debug(
            "batch device=%s stage=%s bucket=%s items=%d rows=%d alone=%s",
            worker.spec.name,
            stage,
            batch[0].bucket,
            len(batch),
            rows,
            alone,
        )
        if alone:
            self.metrics.alone_batches.labels(stage=stage, device=worker.spec.name).inc()
        self.metrics.batch_size.labels(stage=stage, device=worker.spec.name).observe(rows)
        sent = sum(item.payload.nbytes for item in batch if isinstance(item.payload, shm.ShmRef))
        self.metrics.shm_bytes.labels(stage=stage, direction="to_device").inc(sent)
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
        back = [o.value for o in outcomes if isinstance(o, ItemOk)]
        back_bytes = sum(ref.nbytes for ref in back if isinstance(ref, shm.ShmRef))
        if back_bytes:
            self.metrics.shm_bytes.labels(stage=batch[0].stage, direction="from_device").inc(
                back_bytes
            )
        for item, outcome in zip(batch, outcomes, strict=True):
            discard_payload(item)
            if item.future.done():
                if isinstance(outcome, ItemOk):
                    free_segments(outcome.value)
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
            if not self.retry.may_retry(item.attempts):
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
            await asyncio.sleep(self.retry.restart_backoff_s)
            await self.retry.start_until_up(worker.start, f"device worker {worker.spec.name}")
            placement.set_available(worker.spec.name, True)


def discard_payload(item: WorkItem) -> None:
    """Free the item's input in shared memory (done with, or dropped)."""
    free_segments(item.payload)


def _fail(batch: list[WorkItem], error: OcrError) -> None:
    for item in batch:
        discard_payload(item)
        if not item.future.done():
            item.future.set_exception(error)
