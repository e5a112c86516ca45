"""Worker processes that die with the server: a killed main process leaves no orphan behind.

A worker blocked on its pipe sees the parent go (EOF), but one busy in a long batch, or stuck, would
live on, holding its shared-memory segments and the resource tracker's pipe. Linux's parent-death
signal (`prctl(PR_SET_PDEATHSIG)`) has the kernel kill it instead.

The kernel counts the *thread* that started a process as its parent: a worker whose starting thread
exits after the worker set the signal is killed then. Start workers from threads that live as long
as the server (the main thread, `asyncio.to_thread`'s pool). A thread that ends right after
starting one is fine in practice (the worker sets the signal after its imports, by when it has been
handed to the main thread without a signal), but that is a race.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have this process killed (SIGKILL) when its parent dies; call first thing in a worker.

    `parent_pid` is the parent expected alive, by default the process that spawned this one
    (`multiprocessing.parent_process()`). If it is already gone (it died before the signal was
    set, so the signal will never come), this process exits at once. A no-op, with a debug log,
    off Linux and in a process not started by `multiprocessing`.
    """
    if parent_pid is None:
        parent = multiprocessing.parent_process()
        parent_pid = parent.pid if parent is not None else None
    if parent_pid is None:
        logger.debug("not a worker process: no parent-death signal")
        return
    if not sys.platform.startswith("linux"):
        logger.debug("no parent-death signal on %s: workers may outlive the server", sys.platform)
        return
    libc = ctypes.CDLL(None, use_errno=True)  # the C library Python runs on
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        logger.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(error))
        return
    if os.getppid() != parent_pid:
        logger.warning("parent %d died before this worker started; exiting", parent_pid)
        os._exit(1)


async def cancel_and_wait(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel supervising tasks and wait until each has ended; the list is emptied."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    tasks.clear()
