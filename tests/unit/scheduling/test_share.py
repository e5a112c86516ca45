"""Background work's share of the devices (`jobs.min_share`): the account, and the policy keeping
it on a device that interactive work would keep busy, with a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from serving.config import JobsConfig, QueueConfig, StageLimits
from serving.errors import ConfigError
from serving.scheduling.batching import BatchPolicy, WorkItem
from serving.scheduling.placement import Placement
from serving.scheduling.priorities import BACKGROUND, INTERACTIVE
from serving.scheduling.share import BackgroundShare, ShareQueue
from tests.fakes.work import work_item

LIMITS = {
    "det": StageLimits(max_batch_size=1, max_cost=10**9),
    "rec": StageLimits(max_batch_size=1, max_cost=10**9),
}
QUEUES = {stage: QueueConfig() for stage in ("det", "rec")}
DET_S = 0.8
"""A page's det on the one device, as the cost model learnt it."""


def _item(loop: asyncio.AbstractEventLoop, priority: int, stage: str = "det") -> WorkItem:
    return work_item(loop, stage=stage, cost=1_000, priority=priority)


def _one_device() -> Placement:
    placement = Placement()
    placement.add_device("cpu", ("det", "rec"))
    placement.model.observe("cpu", "det", 1_000, DET_S)
    placement.model.observe("cpu", "rec", 1_000, DET_S / 4)
    return placement


def _saturated(min_share: float, batches: int, *, hold_background: bool = False) -> list[int]:
    """Priorities of the batches one device runs, back to back, while interactive and background
    pages are always queued (each taken one is replaced at once)."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        policy = BatchPolicy(QUEUES, background_share=min_share)
        placement = _one_device()
        now = 0.0
        for priority in (INTERACTIVE, INTERACTIVE, BACKGROUND, BACKGROUND):
            policy.submit(_item(loop, priority), now)
        ran = []
        for _ in range(batches):
            (item,) = policy.select(
                now,
                ("det", "rec"),
                LIMITS,
                device="cpu",
                placement=placement,
                hold_background=hold_background,
            ).batch
            ran.append(item.priority)
            now += DET_S
            policy.submit(_item(loop, item.priority), now)
        return ran

    return asyncio.run(main())


def test_strict_priority_starves_background_work_on_a_busy_device() -> None:
    assert set(_saturated(0.0, 200)) == {INTERACTIVE}


@pytest.mark.parametrize("min_share", [0.1, 0.25])
def test_background_work_keeps_its_share_of_a_busy_device(min_share: float) -> None:
    ran = _saturated(min_share, 400)
    share = ran.count(BACKGROUND) / len(ran)
    assert min_share <= share <= min_share + 0.02
    # Spread out, not in a burst: every stretch of 40 batches (32 s) has some.
    assert all(BACKGROUND in ran[i : i + 40] for i in range(0, 400, 40))


def test_its_share_overrides_holding_background_for_interactive_work_coming() -> None:
    ran = _saturated(0.1, 200, hold_background=True)
    assert 0.1 <= ran.count(BACKGROUND) / len(ran) <= 0.12


def test_background_work_alone_runs_whatever_its_share() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        policy = BatchPolicy(QUEUES, background_share=0.1)
        policy.share.record(0.0, 10.0, 10.0)  # all background so far: not due
        job = _item(loop, BACKGROUND)
        policy.submit(job, 0.0)
        selection = policy.select(1.0, ("det",), LIMITS, device="cpu", placement=_one_device())
        assert selection.batch == [job]

    asyncio.run(main())


def test_a_due_share_takes_the_most_urgent_background_batch() -> None:
    """Background candidates keep their own order: a job page's rec (finishing it) before
    another page's det."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        policy = BatchPolicy(QUEUES, background_share=0.1)
        policy.share.record(0.0, 1.0, 0.0)  # interactive only so far: due
        det_job = _item(loop, BACKGROUND)
        rec_job = _item(loop, BACKGROUND, stage="rec")
        policy.submit(det_job, 0.0)
        policy.submit(_item(loop, INTERACTIVE), 0.5)
        policy.submit(rec_job, 1.0)
        placement = _one_device()
        first = policy.select(2.0, ("det", "rec"), LIMITS, device="cpu", placement=placement)
        assert first.batch == [rec_job]
        # Its predicted 0.2 s of 1.2 s in all: background has had its share.
        second = policy.select(2.0, ("det", "rec"), LIMITS, device="cpu", placement=placement)
        assert second.batch[0].priority == INTERACTIVE

    asyncio.run(main())


def test_the_account_decays_with_its_half_life() -> None:
    share = BackgroundShare(0.1, half_life_s=60.0)
    assert not share.due(0.0)  # nothing measured yet: interactive work first
    share.record(0.0, 10.0, 1.0)
    assert not share.due(0.0)  # exactly its share
    share.record(60.0, 10.0, 0.0)  # the first 10 s count half by now
    assert share.background_s == pytest.approx(0.5)
    assert share.total_s == pytest.approx(15.0)
    assert share.due(60.0)
    share.record(120.0, 1.0, 1.0)
    assert not share.due(120.0)  # 1.25 of 8.5 s


def test_zero_is_strict_priority_and_the_share_must_be_below_one() -> None:
    share = BackgroundShare(0.0)
    share.record(0.0, 10.0, 0.0)
    assert not share.due(0.0)
    with pytest.raises(ConfigError, match=r"jobs\.min_share"):
        JobsConfig(min_share=1.0)
    with pytest.raises(ConfigError, match=r"jobs\.page_timeout_s"):
        JobsConfig(page_timeout_s=0)


@pytest.mark.parametrize("min_share", [0.0, 0.2])
def test_the_cpu_workers_queue_keeps_the_share_too(min_share: float) -> None:
    """Calls of one second each, one of each class always waiting."""
    queue: ShareQueue[int] = ShareQueue(min_share)
    queue.push(INTERACTIVE, INTERACTIVE)
    queue.push(BACKGROUND, BACKGROUND)
    ran = []
    for second in range(300):
        priority = queue.pop(float(second))
        assert priority is not None
        ran.append(priority)
        queue.ran(second + 1.0, 1.0, priority)
        queue.push(priority, priority)
    assert min_share <= ran.count(BACKGROUND) / len(ran) <= min_share + 0.02
    assert len(queue) == 2
    assert sorted(queue.drain()) == [INTERACTIVE, BACKGROUND]
    assert queue.pop(300.0) is None


def test_the_cpu_workers_queue_keeps_order_within_a_class() -> None:
    queue: ShareQueue[str] = ShareQueue(0.5)
    for name in ("job-1", "job-2"):
        queue.push(name, BACKGROUND)
    queue.push("request-1", INTERACTIVE)
    queue.push("retry", INTERACTIVE, front=True)
    assert [queue.pop(0.0) for _ in range(4)] == ["retry", "request-1", "job-1", "job-2"]


def test_the_fraction_reported_is_the_decayed_share() -> None:
    share = BackgroundShare(0.1, half_life_s=60.0)
    assert share.fraction(0.0) == 0.0
    share.record(0.0, 4.0, 1.0)
    assert share.fraction(0.0) == pytest.approx(0.25)
    share.record(60.0, 2.0, 0.0)  # 0.5 of 2 + 2
    assert share.fraction(60.0) == pytest.approx(0.125)
