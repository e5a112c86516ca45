"""The CPU worker pool with real spawned processes: outcomes, deaths, abandonment, start-up."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import threading
import time
from pathlib import Path

import pytest

from serving.config import AppConfig
from serving.errors import InvalidInput, ShuttingDown, WorkerUnavailable
from serving.scheduling.memory_budget import MemoryBudget
from serving.scheduling.priorities import BACKGROUND, INTERACTIVE
from serving.service.runtime import Runtime
from serving.workers import cpu_stages, supervisor
from serving.workers.cpu_pool import CpuPool
from serving.workers.quarantine import PageKey, PageQuarantined, reading
from tests.fakes import cpu_calls


def _pool(workers: int = 2, **kwargs: object) -> CpuPool:
    options: dict[str, object] = {"initializer": cpu_calls.init_noop, "initargs": ()}
    options.update(kwargs)
    return CpuPool(workers, **options)  # type: ignore[arg-type]


async def _started(pool: CpuPool) -> CpuPool:
    pool.start()
    await pool.warm_up()
    return pool


def _poll_for_file(directory: Path, prefix: str) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = sorted(directory.glob(f"{prefix}-*"))
        if found:
            found[0].unlink()
            return int(found[0].name.split("-", 1)[1])
        time.sleep(0.02)
    raise TimeoutError(prefix)


async def _wait_for_file(directory: Path, prefix: str) -> int:
    """The pid in the first file named `prefix-<pid>` (a worker reached a known point)."""
    return await asyncio.to_thread(_poll_for_file, directory, prefix)


def test_calls_return_values_and_raise_their_own_errors() -> None:
    async def main() -> None:
        pool = await _started(_pool())
        try:
            assert await pool.run(cpu_calls.add, 2, 3) == 5
            with pytest.raises(InvalidInput, match="not a page"):
                await pool.run(cpu_calls.refuse, "not a page")
            pids = {await pool.run(cpu_calls.pid) for _ in range(6)}
            assert pids <= set(pool.pids())
            assert len(pool.pids()) == 2
            assert pool.ready
        finally:
            await pool.stop()
        assert pool.pids() == []

    asyncio.run(main())


def test_a_worker_killed_while_busy_costs_no_call(tmp_path: Path) -> None:
    async def main() -> None:
        pool = await _started(_pool())
        try:
            calls = [
                asyncio.ensure_future(pool.run(cpu_calls.announce_then_sleep, str(tmp_path), 0.5))
                for _ in range(4)
            ]
            victims = []
            for _ in range(3):  # kill a busy worker three times over, replacements included
                victim = await _wait_for_file(tmp_path, "busy")
                os.kill(victim, signal.SIGKILL)
                victims.append(victim)
            done = await asyncio.wait_for(asyncio.gather(*calls), 120)
            assert len(done) == 4
            assert not set(done) & set(victims)
            assert pool.restarts >= 3
            assert await pool.run(cpu_calls.add, 1, 1) == 2
        finally:
            await pool.stop()

    asyncio.run(main())


def test_a_call_that_kills_every_worker_fails_alone_with_503() -> None:
    async def main() -> None:
        pool = await _started(_pool(max_attempts=3))
        try:
            poison = asyncio.ensure_future(pool.run(cpu_calls.die))
            healthy = [asyncio.ensure_future(pool.run(cpu_calls.add, i, i)) for i in range(5)]
            with pytest.raises(WorkerUnavailable):
                await asyncio.wait_for(poison, 120)
            assert await asyncio.wait_for(asyncio.gather(*healthy), 120) == [0, 2, 4, 6, 8]
            assert pool.restarts >= 3
        finally:
            await pool.stop()

    asyncio.run(main())


def test_a_page_that_killed_two_workers_is_quarantined_by_its_content() -> None:
    """Issue 37, item 6: a page that kills workers fails after two deaths (not 3 tries here and
    4 of a job's runner), and the same page later is refused without a worker."""

    async def main() -> None:
        pool = await _started(_pool(max_attempts=3))
        poison, other = PageKey("ab" * 32, 0), PageKey("ab" * 32, 1)
        try:
            with reading(poison), pytest.raises(PageQuarantined, match=r"Page 0 .* killed 2"):
                await asyncio.wait_for(pool.run(cpu_calls.die), 120)
            assert pool.restarts == 2
            with reading(poison), pytest.raises(PageQuarantined):
                await pool.run(cpu_calls.add, 1, 1)  # refused before it runs
            with reading(other):
                assert await asyncio.wait_for(pool.run(cpu_calls.add, 1, 1), 120) == 2
            with pytest.raises(WorkerUnavailable):  # work on no page: retried as before
                await asyncio.wait_for(pool.run(cpu_calls.die), 120)
        finally:
            await pool.stop()

    asyncio.run(main())


def test_a_worker_killed_while_starting_is_started_again(tmp_path: Path) -> None:
    async def main() -> None:
        pool = _pool(1, initializer=cpu_calls.init_slowly, initargs=(str(tmp_path), 1.0))
        pool.start()
        try:
            starting = await _wait_for_file(tmp_path, "starting")
            os.kill(starting, signal.SIGKILL)
            await pool.warm_up()
            assert starting not in pool.pids()
            assert await pool.run(cpu_calls.add, 20, 22) == 42
        finally:
            await pool.stop()

    asyncio.run(main())


def test_an_abandoned_call_is_cut_short_and_its_worker_replaced(tmp_path: Path) -> None:
    async def main() -> None:
        pool = await _started(_pool(1, abandon_grace_s=0.2))
        try:
            call = asyncio.ensure_future(
                pool.run(cpu_calls.announce_then_sleep, str(tmp_path), 600.0)
            )
            busy = await _wait_for_file(tmp_path, "busy")
            call.cancel()
            # The 600 s call does not hold the only worker: the next call runs on a new one.
            assert await asyncio.wait_for(pool.run(cpu_calls.pid), 120) != busy
            assert pool.restarts == 1
        finally:
            await pool.stop()

    asyncio.run(main())


def test_an_abandoned_calls_memory_charge_stays_until_its_worker_is_gone(tmp_path: Path) -> None:
    """Issue 49: the charge was given back as the caller went away, while the worker went on
    holding the memory for `abandon_grace_s`, so other work took the room meanwhile."""

    async def main() -> None:
        pool = await _started(_pool(1, abandon_grace_s=1.0))
        budget = MemoryBudget(1000)
        try:

            async def charged() -> None:
                async with budget.hold(600) as held:
                    await pool.run(
                        cpu_calls.announce_then_sleep, str(tmp_path), 600.0, holding=held
                    )

            call = asyncio.ensure_future(charged())
            await _wait_for_file(tmp_path, "busy")
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert budget.used_bytes == 600  # the worker still runs it
            other = asyncio.ensure_future(budget.acquire(600))
            await asyncio.sleep(0.3)
            assert not other.done()
            await asyncio.wait_for(other, 60)  # once the worker was killed
            assert budget.used_bytes == 600
        finally:
            await pool.stop()

    asyncio.run(main())


def test_a_spawn_that_never_returns_does_not_block_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wedge seen in a chaos test: the spawn's pipe write blocked the loop thread for good."""
    release = threading.Event()
    real_start = supervisor.SPAWN.Process.start

    def stuck_start(self: object) -> None:
        release.wait(60)
        real_start(self)  # type: ignore[arg-type]

    monkeypatch.setattr(supervisor.SPAWN.Process, "start", stuck_start)

    async def main() -> None:
        pool = _pool(1)
        pool.start()
        try:
            ticks = 0
            for _ in range(5):  # the loop keeps running while the spawn is stuck
                await asyncio.sleep(0.01)
                ticks += 1
            assert ticks == 5
            assert not pool.ready
            release.set()
            await pool.warm_up()
            assert await pool.run(cpu_calls.add, 1, 2) == 3
        finally:
            release.set()
            await pool.stop()

    asyncio.run(main())


def test_worker_start_up_data_fits_in_a_pipe_buffer() -> None:
    """Spawning writes the pickled initializer arguments through a pipe (64 KiB buffer); the
    recogniser's 18,000-label charset once made them 112 KB, so a child that died before reading
    left the parent blocked in `write` for good. A path travels instead."""
    runtime = Runtime.build(AppConfig(), specs=[], jobs=False)
    size = len(pickle.dumps(runtime.cpu._initargs))
    assert size < 4096, size
    # ... and the worker still gets the whole label table from it.
    cpu_stages.init_cpu_worker(*runtime.cpu._initargs)
    assert runtime.bundle.charset == cpu_stages._CHARSET
    assert len(cpu_stages._CHARSET) > 10_000


def test_abort_answers_every_call_now_and_refuses_new_ones(tmp_path: Path) -> None:
    """Shutdown running out of grace: callers in a CPU stage answer 503 instead of being cut."""

    async def main() -> None:
        pool = await _started(_pool(1))
        try:
            running = asyncio.ensure_future(
                pool.run(cpu_calls.announce_then_sleep, str(tmp_path), 600.0)
            )
            await _wait_for_file(tmp_path, "busy")
            queued = asyncio.ensure_future(pool.run(cpu_calls.add, 1, 2))
            await asyncio.sleep(0)
            assert pool.abort(ShuttingDown()) == 2
            for call in (running, queued):
                with pytest.raises(ShuttingDown):
                    await call
            with pytest.raises(ShuttingDown):
                await pool.run(cpu_calls.add, 1, 2)
        finally:
            await pool.stop(timeout_s=0.5)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("share", "first"),
    [
        (0.0, "request"),  # strict priority
        # `jobs.min_share`: after 0.3 s of a request's call, jobs have had less than their
        # share, so a job's call goes first (the next, whichever its few ms leave due).
        (0.1, "job-1"),
    ],
)
def test_background_calls_wait_for_interactive_ones_unless_their_share_is_due(
    tmp_path: Path, share: float, first: str
) -> None:
    async def main() -> None:
        pool = await _started(_pool(1, background_share=share))
        log = tmp_path / "order"
        try:
            busy = asyncio.ensure_future(
                pool.run(cpu_calls.announce_then_sleep, str(tmp_path), 0.3)
            )
            await _wait_for_file(tmp_path, "busy")
            calls = [
                pool.run(cpu_calls.record, str(log), "job-1", priority=BACKGROUND),
                pool.run(cpu_calls.record, str(log), "job-2", priority=BACKGROUND),
                pool.run(cpu_calls.record, str(log), "request", priority=INTERACTIVE),
            ]
            await asyncio.gather(busy, *calls)
            order = log.read_text().split()
            assert order[0] == first
            assert sorted(order) == ["job-1", "job-2", "request"]
            assert [name for name in order if name.startswith("job")] == ["job-1", "job-2"]
        finally:
            await pool.stop()

    asyncio.run(main())
