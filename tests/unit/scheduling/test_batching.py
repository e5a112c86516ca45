"""Batching policy with a fake clock: sizes, waits, buckets, priorities, deadlines, shedding."""

from __future__ import annotations

import asyncio

import pytest

from serving.config import QueueConfig, StageLimits
from serving.errors import DeadlineExceeded, Overloaded, ShuttingDown
from serving.scheduling.batching import BatchPolicy, Scheduler, WorkItem
from serving.scheduling.priorities import BACKGROUND, INTERACTIVE

LIMITS = {
    "det": StageLimits(max_batch_size=2, max_cost=10_000),
    "rec": StageLimits(max_batch_size=12, max_cost=12 * 400),
    "cls": StageLimits(max_batch_size=12, max_cost=12 * 400),
}


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def queues(wait_ms: float = 0.0, max_len: int = 100) -> dict[str, QueueConfig]:
    return {
        s: QueueConfig(max_wait_ms=wait_ms, max_queue_len=max_len) for s in ("det", "cls", "rec")
    }


def item(loop, stage="rec", bucket=320, count=6, priority=INTERACTIVE, deadline=1e9, name=""):
    return WorkItem(
        stage=stage,
        bucket=bucket,
        payload=name,
        count=count,
        cost=count * (bucket if stage != "det" else 1000),
        priority=priority,
        deadline=deadline,
        future=loop.create_future(),
    )


def names(batch):
    return [it.payload for it in batch]


def test_batch_closes_at_max_size(loop):
    policy = BatchPolicy(queues(wait_ms=50))
    for i in range(3):
        policy.submit(item(loop, name=f"r{i}"), now=0.0)
    sel = policy.select(0.0, ["rec"], LIMITS)
    assert names(sel.batch) == ["r0", "r1"]  # 12 crops = 2 chunks of 6: full, no waiting
    assert policy.depth("rec") == 1


def test_batch_waits_then_closes_at_max_wait(loop):
    policy = BatchPolicy(queues(wait_ms=50))
    policy.submit(item(loop, name="a"), now=0.0)
    sel = policy.select(0.010, ["rec"], LIMITS)
    assert sel.batch == []
    assert sel.wake_at == pytest.approx(0.050)
    policy.submit(item(loop, count=3, name="b"), now=0.020)
    assert policy.select(0.049, ["rec"], LIMITS).batch == []
    sel = policy.select(0.050, ["rec"], LIMITS)
    assert names(sel.batch) == ["a", "b"]


def test_zero_wait_takes_what_is_queued(loop):
    policy = BatchPolicy(queues(wait_ms=0))
    policy.submit(item(loop, count=2, name="a"), now=0.0)
    policy.submit(item(loop, count=2, name="b"), now=0.0)
    assert names(policy.select(0.0, ["rec"], LIMITS).batch) == ["a", "b"]


def test_buckets_never_mix(loop):
    policy = BatchPolicy(queues())
    policy.submit(item(loop, bucket=320, count=1, name="w320"), now=0.0)
    policy.submit(item(loop, bucket=640, count=1, name="w640"), now=0.1)
    policy.submit(item(loop, bucket=320, count=1, name="w320b"), now=0.2)
    first = policy.select(1.0, ["rec"], LIMITS).batch
    second = policy.select(1.0, ["rec"], LIMITS).batch
    assert names(first) == ["w320", "w320b"]
    assert names(second) == ["w640"]
    assert {it.bucket for it in first} == {320}


def test_cost_cap_limits_batch(loop):
    policy = BatchPolicy(queues())
    for i in range(4):
        policy.submit(item(loop, bucket=400, count=6, name=f"c{i}"), now=0.0)
    limits = {**LIMITS, "rec": StageLimits(max_batch_size=100, max_cost=6 * 400 * 3)}
    assert names(policy.select(0.0, ["rec"], limits).batch) == ["c0", "c1", "c2"]


def test_item_over_the_cap_runs_alone(loop):
    policy = BatchPolicy(queues())
    policy.submit(item(loop, bucket=3200, count=6, name="huge"), now=0.0)
    assert names(policy.select(0.0, ["rec"], LIMITS).batch) == ["huge"]


def test_interactive_before_background(loop):
    policy = BatchPolicy(queues())
    policy.submit(item(loop, bucket=320, count=6, priority=BACKGROUND, name="job"), now=0.0)
    policy.submit(item(loop, bucket=640, count=6, priority=INTERACTIVE, name="user"), now=1.0)
    assert names(policy.select(2.0, ["rec"], LIMITS).batch) == ["user"]
    assert names(policy.select(2.0, ["rec"], LIMITS).batch) == ["job"]


def test_background_items_fill_after_interactive_in_same_bucket(loop):
    policy = BatchPolicy(queues())
    policy.submit(item(loop, count=6, priority=BACKGROUND, name="job"), now=0.0)
    policy.submit(item(loop, count=6, priority=INTERACTIVE, name="user"), now=1.0)
    policy.submit(item(loop, count=6, priority=INTERACTIVE, name="user2"), now=1.0)
    assert names(policy.select(2.0, ["rec"], LIMITS).batch) == ["user", "user2"]


def test_later_stage_first_then_age(loop):
    policy = BatchPolicy(queues())
    policy.submit(item(loop, stage="det", bucket=(32, 32), count=1, name="det"), now=0.0)
    policy.submit(item(loop, stage="rec", count=6, name="rec"), now=1.0)
    assert names(policy.select(2.0, ["det", "rec"], LIMITS).batch) == ["rec"]
    # A worker limited to det does not see rec work.
    policy.submit(item(loop, stage="rec", count=6, name="rec2"), now=1.0)
    assert names(policy.select(2.0, ["det"], LIMITS).batch) == ["det"]


def test_expired_items_are_dropped_not_run(loop):
    policy = BatchPolicy(queues())
    old = item(loop, deadline=5.0, name="old")
    policy.submit(old, now=0.0)
    policy.submit(item(loop, deadline=50.0, name="fresh"), now=0.0)
    sel = policy.select(10.0, ["rec"], LIMITS)
    assert names(sel.batch) == ["fresh"]
    assert sel.dropped == [old]
    assert policy.depth("rec") == 0


def test_cancelled_items_are_dropped(loop):
    policy = BatchPolicy(queues())
    gone = item(loop, name="gone")
    policy.submit(gone, now=0.0)
    gone.future.cancel()
    sel = policy.select(0.0, ["rec"], LIMITS)
    assert sel.batch == []
    assert sel.dropped == [gone]


def test_full_queue_sheds_load(loop):
    policy = BatchPolicy(queues(max_len=2))
    policy.submit(item(loop), now=0.0)
    policy.submit(item(loop), now=0.0)
    with pytest.raises(Overloaded):
        policy.submit(item(loop), now=0.0)
    # A retry after a worker died is re-queued even when the queue is full.
    retry = item(loop, name="retry")
    retry.enqueued_at = -1.0
    policy.submit(retry, now=0.0, front=True)
    assert names(policy.select(0.0, ["rec"], LIMITS).batch)[0] == "retry"


def test_scheduler_wakes_waiting_worker_and_fails_expired():
    async def scenario():
        now = [0.0]
        dropped = []
        scheduler = Scheduler(queues(), clock=lambda: now[0], on_drop=dropped.append)
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(scheduler.next_batch(["rec"], LIMITS))
        await asyncio.sleep(0)
        assert not waiter.done()
        expired = item(loop, deadline=1.0, name="expired")
        scheduler.submit(expired)
        now[0] = 2.0
        live = item(loop, deadline=10.0, name="live")
        scheduler.submit(live)
        batch = await asyncio.wait_for(waiter, 5)
        assert names(batch) == ["live"]
        with pytest.raises(DeadlineExceeded):
            expired.future.result()
        assert dropped == [expired]

    asyncio.run(scenario())


def test_no_wait_when_no_company_is_possible(loop):
    policy = BatchPolicy(queues(wait_ms=50))
    policy.submit(item(loop, name="alone"), now=0.0)
    assert policy.select(0.0, ["rec"], LIMITS).batch == []
    assert names(policy.select(0.0, ["rec"], LIMITS, company_possible=False).batch) == ["alone"]


def test_waiting_bucket_lets_worker_run_other_ready_work(loop):
    policy = BatchPolicy(queues(wait_ms=50))
    policy.submit(item(loop, stage="rec", name="rec"), now=0.0)
    policy.submit(item(loop, stage="det", bucket=(32, 32), count=1, name="det"), now=0.0)
    limits = {**LIMITS, "det": StageLimits(max_batch_size=1, max_cost=10_000)}
    sel = policy.select(0.001, ["det", "rec"], limits)
    assert names(sel.batch) == ["det"]
    assert names(policy.select(0.050, ["det", "rec"], limits).batch) == ["rec"]


def test_close_fails_queued_and_running_items_and_refuses_new_ones():
    async def scenario():
        dropped = []
        scheduler = Scheduler(queues(), on_drop=dropped.append)
        loop = asyncio.get_running_loop()
        answered = item(loop, name="answered")
        scheduler.submit(answered)
        assert names(await scheduler.next_batch(["rec"], LIMITS)) == ["answered"]
        answered.future.set_result("text")
        running = item(loop, name="running")
        scheduler.submit(running)
        assert names(await scheduler.next_batch(["rec"], LIMITS)) == ["running"]  # on a device
        queued = item(loop, stage="det", bucket=(32, 32), count=1, name="queued")
        scheduler.submit(queued)

        assert not scheduler.closed
        assert scheduler.close() == 2
        assert scheduler.closed
        assert answered.future.result() == "text"
        for failed in (running, queued):
            with pytest.raises(ShuttingDown):
                failed.future.result()
        assert dropped == [queued]  # freed now; the device pool frees the running batch's
        assert scheduler.policy.depth("det") == 0
        with pytest.raises(ShuttingDown):
            scheduler.submit(item(loop, name="late"))
        assert scheduler.policy.depth("rec") == 0

    asyncio.run(scenario())


def test_background_waits_while_interactive_work_is_coming(loop):
    """While an interactive page is in a CPU step that will submit device work, a worker leaves
    background batches (one running would not be preempted) and takes interactive ones."""
    policy = BatchPolicy(queues())
    job = item(loop, stage="det", bucket=(64, 64), count=1, priority=BACKGROUND, name="job")
    policy.submit(job, now=0.0)
    held = policy.select(1.0, ["det", "rec"], LIMITS, hold_background=True)
    assert held.batch == []
    assert held.wake_at is None  # the release notifies: no timer
    crops = item(loop, name="crops")
    policy.submit(crops, now=1.1)
    assert names(policy.select(1.2, ["det", "rec"], LIMITS, hold_background=True).batch) == [
        "crops"
    ]
    assert names(policy.select(1.3, ["det", "rec"], LIMITS).batch) == ["job"]


def test_the_last_interactive_step_ending_wakes_the_workers(loop):
    async def main():
        scheduler = Scheduler(queues())
        job = item(asyncio.get_running_loop(), stage="det", bucket=(64, 64), count=1)
        job.priority = BACKGROUND
        with scheduler.interactive_coming(BACKGROUND):  # background steps hold nothing
            scheduler.submit(job)
            assert await scheduler.next_batch(["det"], LIMITS) == [job]
        scheduler.submit(second := item(asyncio.get_running_loop(), stage="det", count=1))
        second.priority = BACKGROUND
        with scheduler.interactive_coming(INTERACTIVE):
            waiter = asyncio.ensure_future(scheduler.next_batch(["det"], LIMITS))
            await asyncio.sleep(0.01)
            assert not waiter.done()  # held while the interactive step runs
        assert await asyncio.wait_for(waiter, 1.0) == [second]

    loop.run_until_complete(main())
