"""The one worker supervisor (`serving.workers.supervisor`) with real spawned CPU workers: replies
in order, death, unpicklable requests, and a stop that leaves no thread or pipe behind."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
from typing import Any

import numpy as np
import pytest

from serving.workers import shm
from serving.workers.cpu_worker import cpu_worker_main
from serving.workers.supervisor import (
    RetryPolicy,
    WorkerDied,
    WorkerProcess,
    WorkerStartFailed,
    free_segments,
)
from tests.fakes import cpu_calls


def _worker(name: str, **kwargs: Any) -> WorkerProcess:
    target = functools.partial(cpu_worker_main, initializer=cpu_calls.init_noop, initargs=())
    return WorkerProcess(target, name=name, replies=("ok", "error"), **kwargs)


def _threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(f"{name}-")]


def test_replies_settle_requests_in_order_and_stop_leaves_nothing_running() -> None:
    async def main() -> None:
        worker = _worker("sup-order")
        assert await worker.start(60.0) is None  # a CPU worker reports nothing when ready
        assert worker.ready
        assert _threads("sup-order") == ["sup-order-read", "sup-order-write"]
        replies = await asyncio.gather(*(worker.request((cpu_calls.add, (i, 1))) for i in range(5)))
        assert replies == [("ok", i + 1) for i in range(5)]
        await worker.stop(None, 10.0)
        assert worker.exitcode == 0  # it left when asked
        assert not worker.alive
        with pytest.raises(WorkerDied):
            worker.request((cpu_calls.add, (1, 1)))
        for _ in range(100):  # the pipe threads end once the process is gone
            if not _threads("sup-order"):
                break
            await asyncio.sleep(0.05)
        assert _threads("sup-order") == []

    asyncio.run(main())


def test_a_killed_process_fails_what_it_holds_and_what_was_never_sent_costs_nothing() -> None:
    exits: list[int | None] = []

    async def main() -> None:
        worker = _worker("sup-kill", on_exit=lambda: exits.append(worker.exitcode))
        await worker.start(60.0)
        running = worker.request((cpu_calls.die, ()))  # the call kills its own process
        with pytest.raises(WorkerDied) as died:
            await running
        assert died.value.before_sending is False  # it had reached the process
        assert not worker.alive
        with pytest.raises(WorkerDied) as late:
            worker.request((cpu_calls.add, (1, 1)))
        assert late.value.before_sending is True
        await worker.stop(None, 1.0)

    asyncio.run(main())
    assert len(exits) == 1  # on_exit once, whoever saw the exit first


def test_a_request_that_does_not_pickle_fails_alone() -> None:
    async def main() -> None:
        worker = _worker("sup-pickle")
        await worker.start(60.0)
        try:
            with pytest.raises(Exception, match="pickle"):
                await worker.request((cpu_calls.add, (threading.Lock(), 1)))
            assert await worker.request((cpu_calls.add, (2, 2))) == ("ok", 4)
        finally:
            await worker.stop(None, 10.0)

    asyncio.run(main())


def test_a_reply_nobody_awaits_goes_to_on_orphan(prefix: str) -> None:
    orphans: list[Any] = []

    async def main() -> None:
        worker = _worker("sup-orphan", on_orphan=orphans.append)
        await worker.start(60.0)
        try:
            abandoned = worker.request((cpu_calls.add, (1, 1)))
            abandoned.cancel()  # its caller went away
            assert await worker.request((cpu_calls.add, (2, 2))) == ("ok", 4)
        finally:
            await worker.stop(None, 10.0)

    asyncio.run(main())
    assert orphans == [("ok", 2)]
    ref = shm.put(np.ones((2, 2), dtype=np.float32), prefix)
    free_segments(("ok", [ref]))  # the default: every segment a reply names is freed
    assert not os.path.exists(f"/dev/shm/{ref.name}")


def test_a_process_that_dies_while_starting_fails_its_start() -> None:
    async def main() -> None:
        target = functools.partial(cpu_worker_main, initializer=os.abort, initargs=())
        worker = WorkerProcess(target, name="sup-abort", replies=("ok",))
        with pytest.raises(WorkerStartFailed, match="exited while starting"):
            await worker.start(60.0)
        # Its pipe closes as it dies, before it is reaped (an abort may write a core first).
        assert worker.process is not None
        worker.process.join(30)
        assert worker.exitcode == -signal.SIGABRT

    asyncio.run(main())


def test_retry_policy() -> None:
    policy = RetryPolicy(max_attempts=2, restart_backoff_s=0.0)
    assert policy.may_retry(1)
    assert not policy.may_retry(2)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0, restart_backoff_s=0.0)
    starts: list[int] = []

    async def flaky() -> str:
        starts.append(1)
        if len(starts) < 3:
            raise WorkerStartFailed("not yet")
        return "up"

    assert asyncio.run(policy.start_until_up(flaky, "flaky")) == "up"
    assert len(starts) == 3
