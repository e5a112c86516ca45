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
from serving.workers.device_pool import BatchAnswer, DevicePool
from serving.workers.device_worker import BatchCpu, DeviceSpec, ItemFailed, ItemOk
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
    queued_batches: int = 0
    restarts: int = 0
    starts: int = 0
    last_done_at: float = 0.0
    ran: list[list[Any]] = field(default_factory=list)
    restarting: asyncio.Lock = field(default_factory=asyncio.Lock)
    process: object | None = None
    up: bool = False
    active: int = 0
    most_active: int = 0
    lone_threads: int = 0
    alone: list[bool] = field(default_factory=list)
    """Whether each batch was sent to run alone."""
    limits: dict[str, StageLimits] = field(default_factory=lambda: dict(LIMITS))
    sleep_s: float = 0.01
    info: dict[str, Any] = field(default_factory=dict)
    cpu: BatchCpu | None = None
    """What each answer says the batch cost the process (None: not measured)."""

    def __post_init__(self) -> None:
        options = EngineOptions(device="cpu", lone_threads=self.lone_threads)
        self.spec = DeviceSpec(
            name=self.name,
            device=self.name.split("#")[0],
            stages=("rec",),
            engine=EngineChoice(backend="fake", options=options),
            queued_batches=self.queued_batches,
        )

    @property
    def ready(self) -> bool:
        return self.up

    @property
    def pid(self) -> int | None:
        return None

    async def start(self) -> None:
        self.info = {"lone_threads": self.lone_threads}  # as a worker's ready report
        self.starts += 1
        self.process = object()  # a new process each start
        self.up = True

    async def stop(self, timeout_s: float = 10.0) -> None:
        self.up = False

    async def execute(self, stage: str, refs: list[Any], *, alone: bool = False) -> BatchAnswer:
        self.ran.append(list(refs))
        self.alone.append(alone)
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await asyncio.sleep(self.sleep_s)
        finally:
            self.active -= 1
        behaviour = self.behaviours.pop(0) if self.behaviours else doubled
        if isinstance(behaviour, type):
            if behaviour is WorkerDied:
                self.up = False
            raise behaviour(self.name)
        return BatchAnswer(behaviour(refs), self.cpu)


def item(loop: asyncio.AbstractEventLoop, payload: int) -> WorkItem:
    return work_item(loop, payload=payload, deadline=1e12)


def scheduler(others_in_flight: bool = False) -> Scheduler:
    """A scheduler whose admission says whether other pages are in flight."""
    return Scheduler(
        {"rec": QueueConfig(max_wait_ms=0.0, max_queue_len=100)},
        company_possible=lambda: others_in_flight,
    )


async def run(
    workers: list[FakeWorker], payloads: list[int], *, others_in_flight: bool = False
) -> tuple[DevicePool, list[Any]]:
    """Start a pool on `workers`, submit one item per payload, and gather every outcome."""
    loop = asyncio.get_running_loop()
    sched = scheduler(others_in_flight)
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


def test_each_answers_cpu_seconds_add_up_by_stage_in_the_metrics() -> None:
    worker = FakeWorker(cpu=BatchCpu(batch_s=0.25, between_s=0.05))
    pool, outcomes = asyncio.run(run([worker], [1, 2, 3, 4, 5]))  # two batches: 4 and 1 items
    assert outcomes == [2, 4, 6, 8, 10]
    assert len(worker.ran) == 2

    def sample(stage: str) -> float | None:
        labels = {"stage": stage, "device": "cpu"}
        return pool.metrics.registry.get_sample_value("ocr_device_cpu_seconds_total", labels)

    assert sample("rec") == pytest.approx(0.5)
    assert sample("between") == pytest.approx(0.1)


def test_answers_without_cpu_seconds_add_no_series() -> None:
    pool, _ = asyncio.run(run([FakeWorker()], [1, 2]))
    labels = {"stage": "rec", "device": "cpu"}
    assert pool.metrics.registry.get_sample_value("ocr_device_cpu_seconds_total", labels) is None


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


def test_a_worker_is_sent_its_queued_batches_beyond_those_it_runs() -> None:
    """`queued_batches`: the next batch is at the worker when one ends (issue 40), so with 2
    running and 1 queued, 3 batches are with the worker at once."""
    worker = FakeWorker(inflight_batches=2, queued_batches=1)
    _, outcomes = asyncio.run(run([worker], list(range(12))))
    assert outcomes == [2 * p for p in range(12)]
    assert worker.most_active == 3


def alone_flags(workers: list[FakeWorker]) -> list[bool]:
    """Whether each batch ran alone, worker after worker."""
    return [flag for worker in workers for flag in worker.alone]


ONE_ROW = {"rec": StageLimits(max_batch_size=1, max_cost=10_000)}


def lone_pair(sleeps_s: tuple[float, float] = (0.01, 0.01)) -> list[FakeWorker]:
    """Two workers of the CPU device that can run batches alone, a row a batch, each batch
    taking the worker's time of `sleeps_s`."""
    return [
        FakeWorker(name=f"cpu#{i}", lone_threads=2, limits=dict(ONE_ROW), sleep_s=sleep_s)
        for i, sleep_s in enumerate(sleeps_s)
    ]


def test_a_lone_batch_runs_alone_and_batches_in_company_do_not() -> None:
    workers = lone_pair()
    _, outcomes = asyncio.run(run(workers, [5]))
    assert outcomes == [10]
    assert alone_flags(workers) == [True]
    workers = lone_pair(sleeps_s=(0.1, 0.6))
    # Three one-row batches at once: the first two run side by side (the third still queued,
    # then the other worker busy); the third starts when the faster one ends, the other busy.
    _, outcomes = asyncio.run(run(workers, [1, 2, 3]))
    assert outcomes == [2, 4, 6]
    assert alone_flags(workers) == [False, False, False]


def test_no_batch_runs_alone_while_other_pages_are_in_flight() -> None:
    """Other pages in their CPU steps come back to the device soon: a batch on every core
    would share them with the next one."""
    workers = lone_pair()
    _, outcomes = asyncio.run(run(workers, [5], others_in_flight=True))
    assert outcomes == [10]
    assert alone_flags(workers) == [False]


def test_a_page_that_comes_once_the_others_are_done_runs_alone() -> None:
    workers = lone_pair()

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        sched = scheduler()
        pool = DevicePool(workers, sched, restart_backoff_s=0.0)
        await pool.start()
        try:
            first = [item(loop, p) for p in (1, 2)]
            for it in first:
                sched.submit(it)
            done = [await asyncio.wait_for(it.future, 5) for it in first]
            late = item(loop, 3)  # the page that comes after: alone
            sched.submit(late)
            return [*done, await asyncio.wait_for(late.future, 5)]
        finally:
            await pool.stop()

    assert asyncio.run(scenario()) == [2, 4, 6]
    assert sorted(alone_flags(workers)) == [False, False, True]


def test_workers_without_lone_threads_never_run_alone() -> None:
    workers = [FakeWorker(name=f"cpu#{i}", limits=dict(ONE_ROW)) for i in range(2)]
    _, outcomes = asyncio.run(run(workers, [5]))
    assert outcomes == [10]
    assert alone_flags(workers) == [False]
