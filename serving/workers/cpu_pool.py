"""The CPU worker pool: supervised spawn-context processes running `cpu_stages` functions.

Each worker runs one call at a time, fed from one queue. The event loop never blocks on a child:
spawning, sending and receiving happen on threads, and a child that stops answering is killed,
which unblocks them. A worker that dies costs only the call it held: that call runs again on
another worker (up to `max_attempts` times) while the worker is replaced in the background. A call
whose caller went away is left to finish for `abandon_grace_s`, then its worker is killed; results
that come back after their caller went away are freed, so no segment leaks.

(The standard `ProcessPoolExecutor` fails every call in flight when one worker dies, and spawns
replacement workers inside `submit`, on the caller's thread: from the event loop, that spawn could
block for good on a pipe to a child that was already gone.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from serving.errors import OcrError, WorkerUnavailable
from serving.scheduling.share import ShareQueue
from serving.workers import shm
from serving.workers.cpu_worker import cpu_worker_main
from serving.workers.proc import cancel_and_wait

logger = logging.getLogger(__name__)

T = TypeVar("T")

_MP = multiprocessing.get_context("spawn")


class _Died(Exception):
    """The worker process exited (or was killed) before answering."""

    def __init__(self, *, before_sending: bool = False) -> None:
        super().__init__()
        self.before_sending = before_sending
        """The call never reached the process: the attempt does not count."""


@dataclass(eq=False, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    attempts: int = 0
    priority: int = 0


@dataclass(eq=False, slots=True)
class _Worker:
    """One worker slot: its current process and the call it runs."""

    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    call: _Call | None = None
    spawned: int = 0
    """Processes started for this slot so far."""
    up: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive() and self.conn is not None


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
    ) -> None:
        self.workers = workers
        self._initializer = initializer
        self._initargs = initargs
        self._on_restart = on_restart
        self._max_attempts = max_attempts
        self._abandon_grace_s = abandon_grace_s
        self._start_timeout_s = start_timeout_s
        self._restart_backoff_s = restart_backoff_s
        self._slots = [_Worker(i) for i in range(workers)]
        self._queue: ShareQueue[_Call] = ShareQueue(background_share)
        """Interactive before background, then first come; background first while it has had
        less than `background_share` of the workers' time (`jobs.min_share`)."""
        self._wakeup: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._aborted: OcrError | None = None
        self.restarts = 0

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

    async def run(self, fn: Callable[..., T], *args: Any, priority: int = 0) -> T:
        """Run `fn(*args)` in a worker process; lower `priority` runs first (the scheduler's
        INTERACTIVE before BACKGROUND: a job's pages never hold up requests' CPU stages).

        Raises:
            WorkerUnavailable: the pool is not running, or workers died running this call
                `max_attempts` times.
        """
        if self._aborted is not None:
            raise self._aborted
        if self._wakeup is None:
            raise WorkerUnavailable("The CPU worker pool is not running")
        call = _Call(fn, args, asyncio.get_running_loop().create_future(), priority=priority)
        await self._enqueue(call)
        try:
            return await call.future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            call.future.cancel()
            if self._holder(call) is not None:
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
        while True:
            if worker.spawned:
                self.restarts += 1
                if self._on_restart is not None:
                    self._on_restart()
            worker.spawned += 1
            parent, child = _MP.Pipe()
            process = _MP.Process(
                target=cpu_worker_main,
                args=(child, self._initializer, self._initargs),
                name=f"ocr-cpu-{worker.index}",
                daemon=True,
            )
            try:
                async with asyncio.timeout(self._start_timeout_s):
                    # On an executor thread that lives on: a worker's parent-death signal
                    # (`serving.workers.proc`) fires when the *thread* that started it exits.
                    await asyncio.get_running_loop().run_in_executor(None, process.start)
                    child.close()
                    await _in_thread(functools.partial(_receive, parent, process.sentinel))
            except (TimeoutError, OSError, _Died, EOFError):
                logger.exception("CPU worker %d did not start; retrying", worker.index)
                _kill(process)
                parent.close()
                child.close()
                await asyncio.sleep(self._restart_backoff_s)
                continue
            worker.process, worker.conn = process, parent
            worker.up.set()
            logger.debug("CPU worker %d up (pid %s)", worker.index, process.pid)
            return

    async def _run_on(self, worker: _Worker, call: _Call) -> None:
        conn, process = worker.conn, worker.process
        if conn is None or process is None:
            await self._enqueue(call, front=True)
            return
        worker.call = call
        call.attempts += 1
        started = time.monotonic()
        try:
            kind, value = await _in_thread(
                functools.partial(_exchange, conn, process.sentinel, (call.fn, call.args))
            )
        except _Died as died:
            if died.before_sending:
                call.attempts -= 1
            await self._on_death(worker, call, time.monotonic() - started)
            return
        finally:
            worker.call = None
            now = time.monotonic()
            self._queue.ran(now, now - started, call.priority)
        if call.future.done():
            if kind == "ok":
                free_segments(value)
        elif kind == "ok":
            call.future.set_result(value)
        else:
            call.future.set_exception(value)

    async def _on_death(self, worker: _Worker, call: _Call, ran_s: float) -> None:
        process, conn = worker.process, worker.conn
        worker.process = worker.conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            _kill(process)
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
            return
        if call.attempts >= self._max_attempts:
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
        return [w.process.pid for w in self._slots if w.alive and w.process and w.process.pid]

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the processes; calls still queued fail with WorkerUnavailable."""
        await cancel_and_wait(self._tasks)
        self._wakeup = None
        for call in self._queue.drain():
            if not call.future.done():
                call.future.set_exception(WorkerUnavailable("The server is stopping"))
        stops = [_in_thread(functools.partial(_stop, w, timeout_s)) for w in self._slots]
        await asyncio.gather(*stops)


def _in_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """Run blocking `fn` on its own daemon thread; a thread stuck for good never holds up exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        try:
            value, error = fn(), None
        except BaseException as err:  # handed to the awaiting coroutine
            value, error = None, err
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=target, name="cpu-pool-io", daemon=True).start()
    return future


def _exchange(conn: Connection, sentinel: int, message: Any) -> tuple[str, Any]:
    """Send one call and wait for its outcome; raises _Died if the process goes first."""
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError) as err:
        raise _Died(before_sending=True) from err
    reply: tuple[str, Any] = _receive(conn, sentinel)
    return reply


def _receive(conn: Connection, sentinel: int) -> Any:
    ready = wait([conn, sentinel])
    if conn not in ready:
        raise _Died()
    try:
        return conn.recv()
    except (EOFError, OSError) as err:
        raise _Died() from err


def _kill(process: BaseProcess) -> None:
    """Kill without waiting: a process that was never started, or is gone, is fine."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        if process.is_alive():
            process.kill()


def _stop(worker: _Worker, timeout_s: float) -> None:
    process, conn = worker.process, worker.conn
    worker.process = worker.conn = None
    if conn is not None:
        with contextlib.suppress(OSError, ValueError):
            conn.send(None)
        conn.close()
    if process is not None:
        process.join(timeout_s)
        _kill(process)
        process.join(1.0)


def free_segments(value: Any) -> None:
    """Discard every shared-memory segment referenced by a stage result."""
    if isinstance(value, shm.ShmRef):
        shm.discard(value)
    elif isinstance(value, list | tuple):
        for item in value:
            free_segments(item)
    elif hasattr(value, "refs"):
        for ref in value.refs():
            shm.discard(ref)
