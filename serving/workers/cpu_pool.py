"""The CPU worker pool: supervised processes (`serving.workers.supervisor`) running `cpu_stages`
functions.

Each worker runs one call at a time, fed from one queue. A worker that dies costs only the call it
held: that call runs again on another worker (up to `max_attempts` times, the pool's
`RetryPolicy`) while the worker is replaced in the background; a call on a page that killed
workers twice fails instead, and the page is refused from then on (`serving.workers.quarantine`).
A call whose caller went away is left to finish for `abandon_grace_s`, then its worker is killed;
results that come back after their caller went away are freed, so no segment leaks.

(The standard `ProcessPoolExecutor` fails every call in flight when one worker dies, and spawns
replacement workers inside `submit`, on the caller's thread: from the event loop, that spawn could
block for good on a pipe to a child that was already gone.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from serving import tracing
from serving.config import TelemetryConfig
from serving.errors import OcrError, WorkerUnavailable
from serving.proc import cancel_and_wait
from serving.scheduling.memory_budget import Held
from serving.scheduling.share import ShareQueue
from serving.workers.cpu_worker import cpu_worker_main
from serving.workers.quarantine import PageKey, Quarantine, page_read
from serving.workers.sandbox import WorkerLimits
from serving.workers.supervisor import RetryPolicy, WorkerDied, WorkerProcess, free_segments

logger = logging.getLogger(__name__)

T = TypeVar("T")

REPLIES = ("ok", "error")
_EARLY_S = 0.05
"""A caller cancelled this close to its call's deadline went away at it (timers fire early)."""
"""The messages of a CPU worker that answer a call (`serving.workers.cpu_worker`)."""


@dataclass(eq=False, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    attempts: int = 0
    priority: int = 0
    page: PageKey | None = None
    """The page the call works on (`quarantine.reading`): its deaths are counted."""
    trace: tracing.Carrier | None = None
    """The caller's span (`serving.tracing.carrier`), continued in the worker; None: untraced."""
    on_settled: list[Callable[[], None]] = field(default_factory=list)
    """Called once its worker is done with it (answered, or died or was killed)."""
    deadline: float | None = None
    """When its caller gives up on it (`time.monotonic()`), if it says."""
    timed_out: bool = False
    """Its caller went away at its deadline (not a hang-up): a worker killed for it counts."""


@dataclass(eq=False, slots=True)
class _Worker:
    """One worker slot: its current process and the call it runs."""

    index: int
    process: WorkerProcess | None = None
    call: _Call | None = None
    spawned: int = 0
    """Processes started for this slot so far."""
    up: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive


class CpuPool:
    """Process pool for decode and pre/post-processing, with self-healing."""

    def __init__(
        self,
        workers: int,
        *,
        initializer: Callable[..., None],
        initargs: tuple[Any, ...],
        on_restart: Callable[[], None] | None = None,
        max_attempts: int = 3,
        abandon_grace_s: float = 2.0,
        start_timeout_s: float = 120.0,
        restart_backoff_s: float = 0.5,
        background_share: float = 0.0,
        limits: WorkerLimits | None = None,
        environ: Callable[[], Mapping[str, str]] | None = None,
        quarantine: Quarantine | None = None,
        telemetry: TelemetryConfig | None = None,
    ) -> None:
        self.workers = workers
        self._telemetry = telemetry
        """Where workers export their spans (`[telemetry]`); None: they trace nothing."""
        self._limits = limits
        self._environ = environ
        """The environment each worker is spawned with, asked at each spawn
        (`serving.workers.sandbox.scrubbed_environ`); None = ours."""
        self._initializer = initializer
        self._initargs = initargs
        self._on_restart = on_restart
        self.retry = RetryPolicy(max_attempts=max_attempts, restart_backoff_s=restart_backoff_s)
        self._abandon_grace_s = abandon_grace_s
        self._start_timeout_s = start_timeout_s
        self._slots = [_Worker(i) for i in range(workers)]
        self._queue: ShareQueue[_Call] = ShareQueue(background_share)
        """Interactive before background, then first come; background first while it has had
        less than `background_share` of the workers' time (`jobs.min_share`)."""
        self._wakeup: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._aborted: OcrError | None = None
        self.restarts = 0
        self.quarantine = quarantine or Quarantine()
        """Pages that killed workers (`serving.workers.quarantine`)."""

    @property
    def ready(self) -> bool:
        """At least one worker is up, so calls make progress."""
        return any(w.alive for w in self._slots)

    def background_share(self) -> float:
        """Background calls' share of the workers' recent seconds (`jobs.min_share`)."""
        return self._queue.share.fraction(time.monotonic())

    def start(self) -> None:
        """Start supervising the workers (each spawns in the background); needs a running loop."""
        self._wakeup = asyncio.Condition()
        self._tasks = [
            asyncio.create_task(self._supervise(w), name=f"cpu-worker-{w.index}")
            for w in self._slots
        ]

    async def warm_up(self) -> None:
        """Wait until every worker process has started once.

        Raises:
            TimeoutError: a worker did not start within the start timeout.
        """
        async with asyncio.timeout(self._start_timeout_s):
            await asyncio.gather(*(w.up.wait() for w in self._slots))

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        priority: int = 0,
        holding: Held | None = None,
        deadline: float | None = None,
    ) -> T:
        """Run `fn(*args)` in a worker process; lower `priority` runs first (the scheduler's
        INTERACTIVE before BACKGROUND: a job's pages never hold up requests' CPU stages).

        `holding` is the memory budget's charge for what the call takes in its worker: should
        the caller go away while the call runs (it is left `abandon_grace_s`, then its worker
        killed), the charge is kept until the worker is done with it, not given back while the
        worker still holds the memory (issue 49: a job's GIF conversion, hung up on, let other
        work take its room while it went on converting). `deadline` (`time.monotonic()`) is when
        the caller gives up: a worker killed because the call outlived it counts as a death of
        the call's page (`quarantine`), as a crash does; one killed after a hang-up does not.

        Raises:
            WorkerUnavailable: the pool is not running, or workers died running this call
                `max_attempts` times.
            PageQuarantined: the page the call works on (`quarantine.reading`) killed workers
                `quarantine.deaths` times, this call's or earlier ones.
        """
        if self._aborted is not None:
            raise self._aborted
        if self._wakeup is None:
            raise WorkerUnavailable("The CPU worker pool is not running")
        page = page_read()
        self.quarantine.check(page)
        with tracing.span(f"cpu {fn.__name__}"):
            call = _Call(
                fn,
                args,
                asyncio.get_running_loop().create_future(),
                priority=priority,
                page=page,
                trace=tracing.carrier(),
                deadline=deadline,
            )
            return await self._await(call, holding)  # type: ignore[no-any-return]

    async def _await(self, call: _Call, holding: Held | None) -> Any:
        deadline = call.deadline
        await self._enqueue(call)
        try:
            return await call.future
        except asyncio.CancelledError:
            call.future.cancel()
            call.timed_out = deadline is not None and time.monotonic() >= deadline - _EARLY_S
            if self._holder(call) is not None:
                if holding is not None:
                    call.on_settled.append(holding.keep())
                asyncio.get_running_loop().call_later(
                    self._abandon_grace_s, self._kill_if_still_running, call
                )
            raise

    async def _enqueue(self, call: _Call, *, front: bool = False) -> None:
        if self._wakeup is None:
            raise WorkerUnavailable("The CPU worker pool is not running")
        # A retry keeps its place ahead of everything of its priority that came after it.
        self._queue.push(call, call.priority, front=front)
        async with self._wakeup:
            self._wakeup.notify()

    async def _next_call(self, wakeup: asyncio.Condition) -> _Call:
        async with wakeup:
            while True:
                while (call := self._queue.pop(time.monotonic())) is not None:
                    if not call.future.done():
                        return call
                await wakeup.wait()

    async def _supervise(self, worker: _Worker) -> None:
        """Keep one worker process alive and feed it calls, forever."""
        wakeup = self._wakeup
        if wakeup is None:
            raise RuntimeError("start() sets up the queue first")
        while True:
            if not worker.alive:
                await self._spawn(worker)
            call = await self._next_call(wakeup)
            try:
                await self._run_on(worker, call)
            except asyncio.CancelledError:
                if not call.future.done():
                    call.future.set_exception(WorkerUnavailable("The server is stopping"))
                raise
            except Exception as err:  # the supervisor must outlive anything a call does
                logger.exception("CPU worker %d: call %s failed", worker.index, call.fn.__name__)
                if not call.future.done():
                    call.future.set_exception(err)

    async def _spawn(self, worker: _Worker) -> None:
        """Start a process for `worker`, retrying with a back-off until it says it is ready."""
        if worker.process is not None:  # cut off from its pipe, perhaps not yet gone
            worker.process.kill()

        async def start() -> WorkerProcess:
            if worker.spawned:
                self.restarts += 1
                if self._on_restart is not None:
                    self._on_restart()
            worker.spawned += 1
            process = WorkerProcess(
                functools.partial(
                    cpu_worker_main,
                    initializer=self._initializer,
                    initargs=self._initargs,
                    limits=self._limits,
                    telemetry=self._telemetry,
                    process_name=f"cpu-{worker.index}",
                ),
                name=f"ocr-cpu-{worker.index}",
                replies=REPLIES,
                on_orphan=_free_result,
                environ=None if self._environ is None else self._environ(),
            )
            await process.start(self._start_timeout_s)
            return process

        process = await self.retry.start_until_up(start, f"CPU worker {worker.index}")
        worker.process = process
        worker.up.set()
        logger.debug("CPU worker %d up (pid %s)", worker.index, process.pid)

    async def _run_on(self, worker: _Worker, call: _Call) -> None:
        process = worker.process
        if process is None:
            await self._enqueue(call, front=True)
            return
        try:  # again: its page's document may have been quarantined while it waited
            self.quarantine.check(call.page)
        except OcrError as refused:
            if not call.future.done():
                call.future.set_exception(refused)
            return
        worker.call = call
        call.attempts += 1
        started = time.monotonic()
        try:
            kind, value = await process.request((call.fn, call.args, call.trace))
        except WorkerDied as died:
            if died.before_sending:
                call.attempts -= 1
            await self._on_death(
                worker, call, time.monotonic() - started, blamed=not died.before_sending
            )
            return
        finally:
            worker.call = None
            now = time.monotonic()
            self._queue.ran(now, now - started, call.priority)
            for settled in call.on_settled:
                settled()
        if call.future.done():
            if kind == "ok":
                free_segments(value)
        elif kind == "ok":
            call.future.set_result(value)
        else:
            call.future.set_exception(value)

    async def _on_death(
        self, worker: _Worker, call: _Call, ran_s: float, *, blamed: bool = True
    ) -> None:
        """`worker`'s process died running `call` (`blamed`), or before it got it."""
        process, worker.process = worker.process, None
        if process is not None:
            process.kill()
            logger.log(
                logging.WARNING if call.future.done() else logging.ERROR,
                "CPU worker %d (pid %s) died after %.1f s running %s (attempt %d, exit code %s)",
                worker.index,
                process.pid,
                ran_s,
                call.fn.__name__,
                call.attempts,
                process.exitcode,
            )
        if call.future.done():
            if blamed and call.timed_out and call.page is not None:
                self.quarantine.died(call.page)  # it ran past its caller's deadline
            return
        refusal = None
        if blamed and call.page is not None:
            refusal = self.quarantine.died(call.page)
        if refusal is not None:
            logger.error("CPU worker %d: %s", worker.index, refusal.message)
            call.future.set_exception(refusal)
        elif not self.retry.may_retry(call.attempts):
            call.future.set_exception(WorkerUnavailable())
        else:
            await self._enqueue(call, front=True)

    def _holder(self, call: _Call) -> _Worker | None:
        return next((w for w in self._slots if w.call is call), None)

    def _kill_if_still_running(self, call: _Call) -> None:
        worker = self._holder(call)
        if worker is None or worker.process is None:
            return
        logger.warning(
            "CPU worker %d still runs %s %.1f s after its caller went away; killing it",
            worker.index,
            call.fn.__name__,
            self._abandon_grace_s,
        )
        worker.process.kill()

    def abort(self, error: OcrError) -> int:
        """Fail every call queued or running with `error`, and refuse new ones (shutdown: callers
        answer now; a running call's result is freed when it comes back). Returns how many."""
        self._aborted = error
        pending = [*self._queue.drain(), *(w.call for w in self._slots if w.call is not None)]
        failed = 0
        for call in pending:
            if not call.future.done():
                call.future.set_exception(error)
                failed += 1
        return failed

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.process.pid for w in self._slots if w.process and w.alive and w.process.pid]

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the processes; calls still queued fail with WorkerUnavailable."""
        await cancel_and_wait(self._tasks)
        self._wakeup = None
        for call in self._queue.drain():
            if not call.future.done():
                call.future.set_exception(WorkerUnavailable("The server is stopping"))
        processes = [w.process for w in self._slots if w.process is not None]
        for worker in self._slots:
            worker.process = None
        await asyncio.gather(*(p.stop(None, timeout_s) for p in processes))


def _free_result(reply: tuple[str, Any]) -> None:
    """Free a call's result that came back after its caller went away."""
    kind, value = reply
    if kind == "ok":
        free_segments(value)
