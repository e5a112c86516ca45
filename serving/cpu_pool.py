"""The CPU worker pool: a spawn-context process pool that runs `serving.cpu_stages` functions.

A worker that dies breaks the standard pool; the pool is then rebuilt and the call retried once.
Results that come back after their caller went away are freed, so no segment leaks.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from serving import shm
from serving.cpu_stages import init_cpu_worker
from serving.errors import WorkerUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CpuPool:
    """Process pool for decode and pre/post-processing, with self-healing."""

    def __init__(
        self,
        workers: int,
        charset: tuple[str, ...],
        prefix: str,
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        self.workers = workers
        self._initargs = (charset, prefix)
        self._executor: ProcessPoolExecutor | None = None
        self._on_restart = on_restart
        self.restarts = 0

    def start(self) -> None:
        """Create the processes (they start on first use and stay)."""
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=init_cpu_worker,
            initargs=self._initargs,
        )

    async def warm_up(self) -> None:
        """Start every worker process now rather than on the first request."""
        await asyncio.gather(*(self.run(_noop) for _ in range(self.workers)))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` in a worker process."""
        for attempt in (1, 2):
            executor = self._executor
            if executor is None:
                raise WorkerUnavailable("The CPU worker pool is not running")
            try:
                future = executor.submit(fn, *args)
            except BrokenProcessPool:
                self._rebuild(executor)
                continue
            try:
                return await asyncio.wrap_future(future)
            except BrokenProcessPool:
                logger.error("a CPU worker died running %s (attempt %d)", fn.__name__, attempt)
                self._rebuild(executor)
            except asyncio.CancelledError:
                future.add_done_callback(_free_result)
                raise
        raise WorkerUnavailable()

    def _rebuild(self, broken: ProcessPoolExecutor) -> None:
        if self._executor is not broken:
            return  # another caller already rebuilt it
        self.restarts += 1
        if self._on_restart is not None:
            self._on_restart()
        broken.shutdown(wait=False, cancel_futures=True)
        self._executor = self._new_executor()

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        if self._executor is None:
            return []
        processes = getattr(self._executor, "_processes", None) or {}
        return [p.pid for p in processes.values() if p.pid is not None]

    def stop(self) -> None:
        """Stop the processes."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


def _noop() -> None:
    return None


def _free_result(future: Future[Any]) -> None:
    """Free the segments of a result nobody waits for."""
    if future.cancelled() or future.exception() is not None:
        return
    free_segments(future.result())


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
