"""Uvicorn's server, with a shutdown that fits in `server.shutdown_grace_s`.

Uvicorn alone waits the whole grace for requests, cancels those still running (each answered with a
bare 500 and logged with a traceback), then stops the application with no time limit, so a busy
server outlived its grace. Here the grace, counted from the signal, is spent in steps
(`ShutdownPlan`):

1. at once, uvicorn stops accepting connections; requests in flight go on;
2. at `abort_s`, inference work still in flight fails with ShuttingDown, which the handlers answer
   like any error: a JSON 503 with Retry-After, in each endpoint's own format;
3. at `cutoff_s`, requests still running are cancelled (uvicorn's cut-off, brought forward);
4. the application stops its worker processes; at `kill_s`, those still alive are killed, so that
   the process exits within the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import FrameType

import uvicorn

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShutdownPlan:
    """When each step of a graceful shutdown happens, in seconds after the signal."""

    abort_s: float
    """Fail the inference work still in flight with ShuttingDown (503)."""
    cutoff_s: float
    """Cancel the requests still running."""
    kill_s: float
    """Kill the worker processes still alive."""

    @classmethod
    def within(cls, grace_s: float) -> ShutdownPlan:
        """Steps that end `grace_s` after the signal: most of it for requests to finish, then time
        for aborted requests to answer (10 %, at most 2 s), for the workers to exit (20 %, at most
        3 s) and for the process to exit (10 %, at most 0.5 s)."""
        kill_s = grace_s - min(0.5, 0.1 * grace_s)
        cutoff_s = kill_s - min(3.0, 0.2 * grace_s)
        return cls(abort_s=cutoff_s - min(2.0, 0.1 * grace_s), cutoff_s=cutoff_s, kill_s=kill_s)


class GracefulServer(uvicorn.Server):
    """`uvicorn.Server` whose shutdown follows a `ShutdownPlan`.

    `abort` fails the work in flight and returns how many items it failed
    (`Runtime.abort_inflight`: the scheduler's queues and devices, the CPU workers' calls and the
    memory budget's waiters). A SIGTERM ends the process with status 0 once the shutdown is done.
    """

    def __init__(
        self, config: uvicorn.Config, *, plan: ShutdownPlan, abort: Callable[[], int]
    ) -> None:
        super().__init__(config)
        self.plan = plan
        self._abort = abort
        self._signalled_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._signalled_at is None:
            self._signalled_at = time.monotonic()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Uvicorn's shutdown, with the plan's steps timed from the signal."""
        began = self._signalled_at if self._signalled_at is not None else time.monotonic()
        loop = asyncio.get_running_loop()

        def at(offset_s: float) -> float:
            """The loop's clock when `offset_s` have passed since the signal."""
            return loop.time() + began + offset_s - time.monotonic()

        # Uvicorn's cut-off, counted from its wait (about 0.1 s from now); it hands the value to
        # asyncio.timeout, which takes float seconds despite the int annotation.
        cutoff_s = max(0.0, began + self.plan.cutoff_s - time.monotonic())
        self.config.timeout_graceful_shutdown = cutoff_s  # type: ignore[assignment]
        timers = [
            loop.call_at(at(self.plan.abort_s), self._abort_inflight),
            loop.call_at(at(self.plan.kill_s), _kill_workers),
        ]
        try:
            await super().shutdown(sockets)
        finally:
            for timer in timers:
                timer.cancel()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Uvicorn's, except that the SIGTERM that started a graceful shutdown is not raised again
        once it is done (uvicorn does, and the default action then killed the process): the
        process exits with status 0."""
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        previous = signal.signal(signal.SIGTERM, _already_handled)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _abort_inflight(self) -> None:
        failed = self._abort()
        logger.warning(
            "shutdown grace ending: %d pieces of work in flight fail with 503 shutting_down",
            failed,
        )


def _kill_workers() -> None:
    """Kill the worker processes still alive, so that stopping them ends now (their work is
    already failed or done)."""
    alive = multiprocessing.active_children()
    for process in alive:
        process.kill()
    if alive:
        logger.warning(
            "shutdown grace ending: killed %d worker processes still running (pids %s)",
            len(alive),
            ", ".join(str(p.pid) for p in alive),
        )


def _already_handled(signum: int, frame: FrameType | None) -> None:
    """Uvicorn raising again the SIGTERM whose graceful shutdown has just ended: nothing to do."""
