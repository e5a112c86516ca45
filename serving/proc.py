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
import functools
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable

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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except AttributeError:  # not glibc
        return None
    return trim


def release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`); else a no-op.

    A worker's allocations come in bursts of page-sized buffers (a document's bytes, a decoded
    page, a detection map). glibc raises its mmap threshold after freeing a large mapped block, so
    later buffers of that size come from the heap, whose freed pages it keeps: a worker's memory
    then creeps up under steady traffic (+20-30% over ten minutes of `make soak`) without a leak.
    Trimming after each call costs a few system calls and keeps it flat.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


async def cancel_and_wait(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel supervising tasks and wait until each has ended; the list is emptied."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    tasks.clear()
