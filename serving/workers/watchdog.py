"""A thread that watches the event loop: a loop stuck past its limit ends the process.

A stuck loop answers nothing, `/livez` included, and nothing inside the process can unstick it, so
the watchdog writes every thread's stack to stderr (what was it blocked on?) and exits with
`STALL_EXIT_CODE`, for the supervisor (Kubernetes, Docker's restart policy, systemd) to start a
fresh server. Worker processes die with the main one (`serving.proc`), and the next
server sweeps the shared memory left behind.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

STALL_EXIT_CODE = 70
"""EX_SOFTWARE: the exit status of a server whose event loop stalled."""


def exit_stalled(stalled_s: float) -> None:
    """Default reaction: stacks to stderr, then exit at once (the loop cannot shut down)."""
    logger.critical(
        "the event loop has not run for %.1f s; exiting with %d for a restart",
        stalled_s,
        STALL_EXIT_CODE,
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    os._exit(STALL_EXIT_CODE)


class LoopWatchdog:
    """Posts a heartbeat into `loop` every `interval_s`; calls `on_stall` once if none is run for
    `stall_s`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        stall_s: float,
        *,
        interval_s: float = 1.0,
        on_stall: Callable[[float], None] = exit_stalled,
    ) -> None:
        self._loop = loop
        self._stall_s = stall_s
        self._interval_s = min(interval_s, stall_s / 4)
        self._on_stall = on_stall
        self._last_beat = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._last_beat = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the thread ends within one interval)."""
        self._stopped.set()

    def _beat(self) -> None:
        self._last_beat = time.monotonic()

    def _watch(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                self._loop.call_soon_threadsafe(self._beat)
            except RuntimeError:  # the loop is closed: nothing left to watch
                return
            stalled = time.monotonic() - self._last_beat
            if stalled > self._stall_s:
                self._on_stall(stalled)
                return
