"""The dispatcher (`DevicePool`) with fake device workers: outcomes, requeue-once, restarts.

The fakes stand for worker processes; the scheduler, placement and pool are the server's own.
The real processes are exercised by the e2e kill tests (`tests/e2e/test_scheduling.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from models.engine_options import EngineOptions
from models.registry import EngineChoice
from serving.config import QueueConfig, StageLimits
from serving.errors import OcrError, WorkerUnavailable
from serving.scheduling.batching import Scheduler, WorkItem
from serving.workers.device_pool import DevicePool
from serving.workers.device_worker import DeviceSpec, ItemFailed, ItemOk
from serving.workers.supervisor import WorkerDied
from tests.fakes.work import work_item

LIMITS = {"rec": StageLimits(max_batch_size=4, max_cost=10_000)}

Behaviour = Callable[[list[Any]], list[ItemOk | ItemFailed]]


def doubled(payloads: list[Any]) -> list[ItemOk | ItemFailed]:
    return [ItemOk(p * 2) for p in payloads]


@dataclass(eq=False)
class FakeWorker:
    """A device worker whose batches follow `behaviours` in turn (then `doubled`)."""

    name: str = "cpu"
    behaviours: list[Behaviour | type[Exception]] = field(default_factory=list)
    inflight_batches: int = 1
    restarts: int = 0
    starts: int = 0
    last_done_at: float = 0.0
    ran: list[list[Any]] = field(default_factory=list)
    restarting: asyncio.Lock = field(default_factory=asyncio.Lock)
    process: object | None = None
    up: bool = False
    active: int = 0
    most_active: int = 0

    def __post_init__(self) -> None:
        self.spec = DeviceSpec(
            name=self.name,
            device="cpu",
            stages=("rec",),
            engine=EngineChoice(backend="fake", options=EngineOptions(device="cpu")),
        )
        self.limits = LIMITS

    @property
    def ready(self) -> bool:
        return self.up

    @property
    def pid(self) -> int | None:
        return None

    async def start(self) -> None:
        self.starts += 1
        self.process = object()  # a new process each start
        self.up = True

    async def stop(self, timeout_s: float = 10.0) -> None:
        self.up = False

    async def execute(self, stage: str, refs: list[Any]) -> list[ItemOk | ItemFailed]:
        self.ran.append(list(refs))
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await asyncio.sleep(0.01)
        finally:
            self.active -= 1
        behaviour = self.behaviours.pop(0) if self.behaviours else doubled
        if isinstance(behaviour, type):
            if behaviour is WorkerDied:
                self.up = False
            raise behaviour(self.name)
        return behaviour(refs)


def item(loop: asyncio.AbstractEventLoop, payload: int) -> WorkItem:
    return work_item(loop, payload=payload, deadline=1e12)


def scheduler() -> Scheduler:
    return Scheduler({"rec": QueueConfig(max_wait_ms=0.0, max_queue_len=100)})


async def run(workers: list[FakeWorker], payloads: list[int]) -> tuple[DevicePool, list[Any]]:
    """Start a pool on `workers`, submit one item per payload, and gather every outcome."""
    loop = asyncio.get_running_loop()
    sched = scheduler()
    pool = DevicePool(workers, sched, restart_backoff_s=0.0)
    await pool.start()
    items = [item(loop, p) for p in payloads]
    for it in items:
        sched.submit(it)
    try:
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(it.future for it in items), return_exceptions=True), 5
        )
    finally:
        await pool.stop()
    return pool, outcomes


def test_each_item_gets_its_own_outcome() -> None:
    worker = FakeWorker()
    _, outcomes = asyncio.run(run([worker], [1, 2, 3, 4, 5]))
    assert outcomes == [2, 4, 6, 8, 10]
    assert all(len(batch) <= LIMITS["rec"].max_batch_size for batch in worker.ran)


def test_a_worker_that_dies_is_restarted_and_its_batch_runs_again() -> None:
    worker = FakeWorker(behaviours=[WorkerDied])
    pool, outcomes = asyncio.run(run([worker], [1, 2]))
    assert outcomes == [2, 4]
    assert pool.restarts == 1
    assert worker.restarts == 1
    assert worker.starts == 2
    assert worker.ran[0] == worker.ran[1]  # the same batch, again, after the restart


def test_an_item_whose_worker_dies_twice_fails_with_503_and_the_rest_go_on() -> None:
    worker = FakeWorker(behaviours=[WorkerDied, WorkerDied])
    pool, outcomes = asyncio.run(run([worker], [7]))
    assert isinstance(outcomes[0], WorkerUnavailable)
    assert outcomes[0].http_status == 503
    assert pool.restarts == 2
    _, later = asyncio.run(run([FakeWorker()], [3]))  # a fresh pool serves normally
    assert later == [6]


def test_a_failing_dispatch_loop_restarts_and_keeps_its_batch() -> None:
    worker = FakeWorker(behaviours=[RuntimeError])
    pool, outcomes = asyncio.run(run([worker], [1, 2]))
    assert outcomes == [2, 4]
    assert pool.dispatch_failures == 1
    assert pool.restarts == 0  # the process was fine: not restarted


def test_an_item_failure_fails_that_item_only() -> None:
    def second_fails(payloads: list[Any]) -> list[ItemOk | ItemFailed]:
        return [ItemOk(payloads[0] * 2), ItemFailed(OcrError("bad crop"))]

    worker = FakeWorker(behaviours=[second_fails])
    _, outcomes = asyncio.run(run([worker], [1, 2]))
    assert outcomes[0] == 2
    assert isinstance(outcomes[1], OcrError)
    assert str(outcomes[1]) == "bad crop"


def test_a_short_answer_fails_the_whole_batch_rather_than_misassign() -> None:
    worker = FakeWorker(behaviours=[lambda payloads: [ItemOk(0)]])
    _, outcomes = asyncio.run(run([worker], [1, 2]))
    assert all(isinstance(o, OcrError) for o in outcomes)
    assert "1 results for 2 items" in str(outcomes[0])


def test_the_other_worker_serves_while_one_restarts() -> None:
    dying = FakeWorker(name="gpu:0", behaviours=[WorkerDied])
    steady = FakeWorker(name="cpu")
    while_down: list[bool] = []

    def record(payloads: list[Any]) -> list[ItemOk | ItemFailed]:
        while_down.append(not dying.up)
        return doubled(payloads)

    steady.behaviours = [record] * 20

    async def scenario() -> list[Any]:
        original_start = dying.start

        async def slow_start() -> None:  # the restart takes a while
            if dying.starts:
                await asyncio.sleep(0.2)
            await original_start()

        dying.start = slow_start  # type: ignore[method-assign]
        _, outcomes = await run([dying, steady], list(range(1, 9)))
        return outcomes

    outcomes = asyncio.run(scenario())
    assert outcomes == [2 * p for p in range(1, 9)]
    assert any(while_down), "the live worker took work while the other restarted"


@pytest.mark.parametrize("inflight", [1, 2])
def test_inflight_batches_run_concurrently_on_one_worker(inflight: int) -> None:
    worker = FakeWorker(inflight_batches=inflight)
    _, outcomes = asyncio.run(run([worker], list(range(12))))
    assert outcomes == [2 * p for p in range(12)]
    assert worker.most_active == inflight
