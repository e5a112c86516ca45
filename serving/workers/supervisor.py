"""Worker processes seen from the main process: the one module that spawns them, talks to them,
sees them die, starts them again and frees what they leave in shared memory.

A `WorkerProcess` is one spawned child and its pipe; a restart makes a new one. The event loop
never blocks on it. The spawn runs on an executor thread (it writes start-up data through a pipe,
and a thread that lives on keeps the child's parent-death signal armed: `serving.proc`),
and the pipe has two threads of its own for as long as the child lives: one writes the queued
messages in order, one waits on the pipe and the child's sentinel together, so a child that dies,
or is killed, wakes it. What it reads comes back to the loop: replies settle the requests in the
order they were sent (both kinds of child answer in that order), other messages go to
`on_notice`, and the child's exit fails every request still waiting with `WorkerDied`.

Both children speak the same start-up protocol: their first message is `("ready", info)`, or
`("fatal", reason)` when they cannot start.

The pools are policies over it. `cpu_pool`: one call at a time per worker, a call whose worker died
runs again on another (3 attempts). `device_pool`: batches pipelined per worker, a batch whose
worker died queued again once. Each states that as its `RetryPolicy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import queue
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from serving.workers import shm
from serving.workers.sandbox import EnvSpawnProcess

logger = logging.getLogger(__name__)

T = TypeVar("T")

SPAWN = multiprocessing.get_context("spawn")
"""Every worker process is spawned: a forked child would inherit the server's threads and loop."""


class WorkerDied(Exception):
    """The worker process exited (or was killed) before it answered."""

    def __init__(self, name: str = "", *, before_sending: bool = False) -> None:
        super().__init__(name)
        self.before_sending = before_sending
        """The request never reached the process: it was not run, so it costs no attempt."""


class WorkerStartFailed(RuntimeError):
    """The process said it cannot start, or exited before it said it was ready."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """What a pool does when a worker process dies or does not start."""

    max_attempts: int
    """Runs of one piece of work, the first included: work whose worker died this many times
    fails with `WorkerUnavailable` (503) rather than kill yet another worker."""
    restart_backoff_s: float
    """Pause before a process is started again after one died or failed to start."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.restart_backoff_s < 0:
            raise ValueError(f"restart_backoff_s must be >= 0, got {self.restart_backoff_s}")

    def may_retry(self, attempts: int) -> bool:
        """Whether work that has run `attempts` times, its worker dying each time, runs again."""
        return attempts < self.max_attempts

    async def start_until_up(self, start: Callable[[], Awaitable[T]], what: str) -> T:
        """`start()` again, `restart_backoff_s` apart, until it succeeds."""
        while True:
            try:
                return await start()
            except (WorkerStartFailed, WorkerDied, TimeoutError, OSError):
                logger.exception("%s did not start; retrying", what)
            await asyncio.sleep(self.restart_backoff_s)


@dataclass(eq=False, slots=True)
class _Request:
    message: Any
    future: asyncio.Future[Any]
    sent: bool = False
    """Set by the writer thread once the message is in the pipe."""


class WorkerProcess:
    """One spawned worker process and its pipe, for the event loop.

    Args:
        target: the child's entry point, called with the child's end of the pipe.
        name: the process's name (also in logs and errors).
        replies: the message kinds (`message[0]`) that answer a request.
        on_notice: called on the loop with every other message after start-up.
        on_exit: called on the loop once, when the process has exited or its pipe closed.
        on_orphan: called on the loop with a reply whose request nobody awaits any more (its
            caller was cancelled), to free what it holds; by default `free_segments(reply)`.
        environ: the child's whole environment (`serving.workers.sandbox`); None = the parent's.
    """

    def __init__(
        self,
        target: Callable[[Connection], None],
        *,
        name: str,
        replies: Collection[str],
        on_notice: Callable[[Any], None] | None = None,
        on_exit: Callable[[], None] | None = None,
        on_orphan: Callable[[Any], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self._environ = environ
        self._target = target
        self._replies = frozenset(replies)
        self._on_notice = on_notice
        self._on_exit = on_exit
        self._on_orphan = on_orphan or free_segments
        self.process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._outbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._pending: deque[_Request] = deque()
        self._ready: asyncio.Future[Any] | None = None
        self._reader: threading.Thread | None = None
        self._exited = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode if self.process is not None else None

    @property
    def alive(self) -> bool:
        """Started, and neither exited nor cut off from its pipe."""
        return (
            self.process is not None
            and self._conn is not None
            and not self._exited
            and self.process.is_alive()
        )

    @property
    def ready(self) -> bool:
        """Said it is ready, and alive."""
        return (
            self._ready is not None
            and self._ready.done()
            and not self._ready.cancelled()
            and self._ready.exception() is None
            and self.alive
        )

    async def start(self, timeout_s: float) -> Any:
        """Spawn the process and wait until it says it is ready; returns what it reported then.
        A process that does not start is killed.

        Raises:
            WorkerStartFailed: it said it cannot start, or exited first.
            TimeoutError: it said nothing within `timeout_s`.
            OSError: it could not be spawned.
        """
        if self.process is not None:
            raise RuntimeError(f"{self.name} was started already; a restart is a new process")
        loop = asyncio.get_running_loop()
        parent, child = SPAWN.Pipe()
        self._ready = loop.create_future()
        if self._environ is None:
            self.process = SPAWN.Process(
                target=self._target, args=(child,), name=self.name, daemon=True
            )
        else:
            self.process = EnvSpawnProcess(
                target=self._target,
                args=(child,),
                name=self.name,
                daemon=True,
                environ=self._environ,
            )
        try:
            async with asyncio.timeout(timeout_s):
                # On an executor thread that lives on (see the module docstring).
                await loop.run_in_executor(None, self.process.start)
                child.close()
                self._conn = parent
                self._start_io(loop, parent, self.process.sentinel)
                return await asyncio.shield(self._ready)
        except BaseException:
            self._ready.cancel()  # nobody awaits it any more
            self.kill()
            if self._conn is None:  # the pipe threads, once started, close it when they end
                parent.close()
            child.close()
            raise

    def request(self, message: Any) -> asyncio.Future[Any]:
        """Send `message`; the future gets the reply (the whole message), or `WorkerDied`.

        Raises:
            WorkerDied: the process has exited, or was never started.
        """
        if self._conn is None or self._exited:
            raise WorkerDied(self.name, before_sending=True)
        request = _Request(message, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        self._outbox.put(request)
        return request.future

    def kill(self) -> None:
        """Kill without waiting: a process that was never started, or is gone, is fine."""
        process = self.process
        with contextlib.suppress(AttributeError, ValueError, OSError):
            if process is not None and process.is_alive():
                process.kill()

    async def stop(self, goodbye: Any, timeout_s: float) -> None:
        """Send `goodbye` (the child's stop message), give it `timeout_s` to exit, then kill it."""
        process = self.process
        if process is None:
            return
        if self.alive:
            self._outbox.put(_Request(goodbye, asyncio.get_running_loop().create_future()))
        with contextlib.suppress(ValueError):  # never started
            await asyncio.to_thread(process.join, timeout_s)
        self.kill()
        with contextlib.suppress(ValueError):
            await asyncio.to_thread(process.join, 1.0)
        if self._reader is not None:  # done with the pipe once the process is gone
            await asyncio.to_thread(self._reader.join, 1.0)
        self._closed()  # now, not when the loop may be closed: the writer ends and closes the pipe

    def _start_io(self, loop: asyncio.AbstractEventLoop, conn: Connection, sentinel: int) -> None:
        def to_loop(fn: Callable[..., None], *args: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(fn, *args)

        def read() -> None:
            try:
                while True:
                    ready = wait([conn, sentinel])
                    if conn not in ready:  # exited: what it said first is still in the pipe
                        while conn.poll():
                            to_loop(self._received, conn.recv())
                        return
                    to_loop(self._received, conn.recv())
            except (EOFError, OSError, ValueError):
                return
            finally:
                to_loop(self._closed)

        def write() -> None:
            broken = False
            # Until `_closed` says the reader is done with the pipe: only then may it close.
            while (request := self._outbox.get()) is not None:
                if broken:
                    continue
                try:
                    conn.send(request.message)
                except OSError:
                    broken = True  # the process is gone: the reader sees it
                    continue
                except Exception as err:  # did not pickle: nothing was written
                    to_loop(self._unsent, request, err)
                    continue
                request.sent = True
            conn.close()

        self._reader = threading.Thread(target=read, name=f"{self.name}-read", daemon=True)
        self._reader.start()
        threading.Thread(target=write, name=f"{self.name}-write", daemon=True).start()

    def _received(self, message: Any) -> None:
        kind = message[0]
        ready = self._ready
        if ready is not None and not ready.done():
            if kind == "ready":
                ready.set_result(message[1])
            elif kind == "fatal":
                ready.set_exception(WorkerStartFailed(f"{self.name}: {message[1]}"))
            else:
                logger.warning("%s sent %r before it was ready", self.name, kind)
        elif kind in self._replies:
            if not self._pending:
                logger.warning("%s sent a %r nobody asked for", self.name, kind)
                self._on_orphan(message)
                return
            request = self._pending.popleft()
            if request.future.done():
                self._on_orphan(message)
            else:
                request.future.set_result(message)
        elif self._on_notice is not None:
            self._on_notice(message)

    def _unsent(self, request: _Request, error: Exception) -> None:
        with contextlib.suppress(ValueError):
            self._pending.remove(request)
        if not request.future.done():
            request.future.set_exception(error)

    def _closed(self) -> None:
        if self._exited:
            return
        self._exited = True
        self._outbox.put(None)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WorkerStartFailed(f"{self.name} exited while starting"))
        pending, self._pending = self._pending, deque()
        for request in pending:
            if not request.future.done():
                request.future.set_exception(WorkerDied(self.name, before_sending=not request.sent))
        if self._on_exit is not None:
            self._on_exit()


def free_segments(value: Any) -> None:
    """Discard every shared-memory segment `value` references: a `ShmRef`, the refs of an object
    with `refs()`, and those inside lists and tuples (a reply, a stage's result, a payload)."""
    if isinstance(value, shm.ShmRef):
        shm.discard(value)
    elif isinstance(value, list | tuple):
        for item in value:
            free_segments(item)
    elif hasattr(value, "refs"):
        for ref in value.refs():
            shm.discard(ref)
