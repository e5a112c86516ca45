"""Placement by expected finish time, the cost model behind it, and the policy using them, with a
fake clock and hand-written batch times."""

from __future__ import annotations

import asyncio

import pytest

from serving.config import QueueConfig, StageLimits
from serving.scheduling.batching import BatchPolicy, WorkItem
from serving.scheduling.cost_model import CostModel, size_class
from serving.scheduling.placement import Placement
from serving.scheduling.priorities import BACKGROUND
from tests.fakes.work import work_item

LIMITS = {
    "det": StageLimits(max_batch_size=1, max_cost=10**9),
    "rec": StageLimits(max_batch_size=8, max_cost=10**9),
    "cls": StageLimits(max_batch_size=8, max_cost=10**9),
}
QUEUES = {stage: QueueConfig() for stage in ("det", "rec", "cls")}


def _item(stage: str, cost: int, loop: asyncio.AbstractEventLoop) -> WorkItem:
    return work_item(loop, stage=stage, cost=cost)


def _gpu_and_cpu() -> Placement:
    """A GPU 20x faster than the CPU on det and 4x on rec, as learnt from measured batches."""
    placement = Placement()
    placement.add_device("gpu:0", ("det", "rec", "cls"))
    placement.add_device("cpu", ("det", "rec", "cls"))
    for _ in range(3):
        placement.model.observe("gpu:0", "det", 2_000_000, 0.05)
        placement.model.observe("cpu", "det", 2_000_000, 1.0)
        placement.model.observe("gpu:0", "rec", 2_000, 0.01)
        placement.model.observe("cpu", "rec", 2_000, 0.04)
    return placement


def test_the_cost_model_learns_per_device_stage_and_size_class() -> None:
    model = CostModel(smoothing=0.5)
    assert model.predict("cpu", "det", 1000) is None
    model.observe("cpu", "det", 1000, 1.0)
    model.observe("cpu", "det", 1000, 2.0)
    assert model.predict("cpu", "det", 1000) == pytest.approx(1.5)
    # An unmeasured size class is scaled from the nearest measured one.
    assert model.predict("cpu", "det", 4000) == pytest.approx(6.0)
    assert model.predict("cpu", "rec", 1000) is None
    assert model.predict("gpu:0", "det", 1000) is None
    assert size_class(1000) == 10
    assert size_class(1024) == 10
    assert size_class(1025) == 11
    # Memory stays bounded: one estimate per size class, however many batches.
    for cost in range(1, 100_000, 7):
        model.observe("cpu", "rec", cost, cost * 1e-5)
    assert len(model.describe()) <= 1 + size_class(100_000) + 1


def test_an_idle_cpu_leaves_a_detection_batch_the_gpu_finishes_sooner() -> None:
    placement = _gpu_and_cpu()
    now = 10.0
    # The GPU is idle too: it would finish in 0.05 s, the CPU in 1 s.
    assert placement.leave_until("cpu", "det", 2_000_000, now) == now
    assert placement.leave_until("gpu:0", "det", 2_000_000, now) is None
    # With 30 GPU batches ahead of it (1.5 s), the CPU's 1 s wins: it takes the page.
    for _ in range(30):
        placement.started("gpu:0", "det", 2_000_000, now)
    assert placement.leave_until("cpu", "det", 2_000_000, now) is None
    # With 10 (0.5 s) the GPU still wins; the CPU looks again when the GPU frees.
    busy = _gpu_and_cpu()
    tokens = [busy.started("gpu:0", "det", 2_000_000, now) for _ in range(10)]
    assert busy.leave_until("cpu", "det", 2_000_000, now) == pytest.approx(now + 0.5)
    for token in tokens:
        busy.finished("gpu:0", token, "det", 2_000_000, 0.05)
    assert busy.free_at("gpu:0", now) == now


def test_a_device_never_measured_takes_its_batch_and_one_device_never_leaves() -> None:
    placement = _gpu_and_cpu()
    placement.add_device("gpu:1", ("det", "rec", "cls"))
    assert placement.leave_until("gpu:1", "det", 2_000_000, 0.0) is None
    alone = Placement()
    alone.add_device("cpu", ("det", "rec"))
    alone.model.observe("cpu", "det", 100, 100.0)
    assert alone.leave_until("cpu", "det", 100, 0.0) is None


def test_a_device_only_competes_for_the_stages_it_serves() -> None:
    placement = _gpu_and_cpu()
    placement.add_device("gpu:0", ("det",))  # the GPU serves det only now
    assert placement.leave_until("cpu", "rec", 2_000, 0.0) is None


def test_the_policy_gives_the_cpu_the_rec_batch_and_leaves_it_det_pages() -> None:
    """A slow device gets the work that suits it instead of none: with the GPU busy on det for a
    while, the CPU takes the small rec batch (where it is only 4x slower) and leaves the page."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        placement = _gpu_and_cpu()
        now = 100.0
        for _ in range(3):  # 0.15 s of det ahead on the GPU
            placement.started("gpu:0", "det", 2_000_000, now)
        policy = BatchPolicy(QUEUES)
        page = _item("det", 2_000_000, loop)
        crops = _item("rec", 2_000, loop)
        policy.submit(page, now)
        policy.submit(crops, now)
        # rec comes first anyway (later stages first); once it is gone, the CPU leaves the page.
        first = policy.select(now, ("det", "rec"), LIMITS, device="cpu", placement=placement)
        assert first.batch == [crops]
        second = policy.select(now, ("det", "rec"), LIMITS, device="cpu", placement=placement)
        assert second.batch == []
        assert second.wake_at == pytest.approx(now + 0.15)
        # The GPU takes it; without placement the CPU would have.
        gpu = policy.select(now, ("det", "rec"), LIMITS, device="gpu:0", placement=placement)
        assert gpu.batch == [page]

    asyncio.run(main())


def test_with_a_backlog_the_slow_device_takes_from_the_tail_never_the_head() -> None:
    """20 pages of one shape queued: the GPU (0.05 s a page) reaches the last ones after ~1 s,
    the CPU finishes one in 0.4 s, so the CPU takes the least urgent page; with 3 queued the GPU
    is done with all of them in 0.15 s and the CPU leaves them."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        placement = Placement()
        placement.add_device("gpu:0", ("det",))
        placement.add_device("cpu", ("det",))
        placement.model.observe("gpu:0", "det", 1_000_000, 0.05)
        placement.model.observe("cpu", "det", 1_000_000, 0.4)
        now = 50.0
        policy = BatchPolicy(QUEUES)
        pages = []
        for i in range(20):
            page = _item("det", 1_000_000, loop)
            policy.submit(page, now + i * 0.001)
            pages.append(page)
        cpu = policy.select(now + 1, ("det",), LIMITS, device="cpu", placement=placement)
        assert cpu.batch == [pages[-1]]
        gpu = policy.select(now + 1, ("det",), LIMITS, device="gpu:0", placement=placement)
        assert gpu.batch == [pages[0]]

        few = BatchPolicy(QUEUES)
        for _ in range(3):
            few.submit(_item("det", 1_000_000, loop), now)
        left = few.select(now, ("det",), LIMITS, device="cpu", placement=placement)
        assert left.batch == []
        # The idle GPU takes them; the CPU waits for a change, not for a time already due (a
        # zero timeout made its dispatch loop spin).
        assert left.wake_at is None
        # A GPU that is restarting is left nothing: the CPU takes the page.
        placement.set_available("gpu:0", False)
        taken = few.select(now, ("det",), LIMITS, device="cpu", placement=placement)
        assert len(taken.batch) == 1

    asyncio.run(main())


def test_work_left_to_the_gpu_counts_as_its_queue_across_buckets() -> None:
    """30 pages of different shapes (one bucket each): the idle GPU (0.05 s a page) would reach
    the 21st only after 1.05 s, the CPU finishes it in 1 s. The CPU leaves the first 20 to the
    GPU and takes the 21st; counting only the batches the GPU holds, it left all 30 and idled."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        placement = _gpu_and_cpu()
        now = 10.0
        policy = BatchPolicy(QUEUES)
        pages = []
        for i in range(30):
            page = _item("det", 2_000_000 + i, loop)  # a shape of its own: its own bucket
            policy.submit(page, now + i * 0.001)
            pages.append(page)
        cpu = policy.select(now + 1, ("det",), LIMITS, device="cpu", placement=placement)
        assert cpu.batch == [pages[20]]
        gpu = policy.select(now + 1, ("det",), LIMITS, device="gpu:0", placement=placement)
        assert gpu.batch == [pages[0]]

    asyncio.run(main())


def test_background_items_ride_along_only_where_batches_are_short() -> None:
    """A job's chunk of the same width joins an interactive batch on the GPU (a few ms more), not
    on the CPU device, where it would make the interactive batch take twice as long."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        model = CostModel()
        model.observe("gpu:0", "rec", 2_000, 0.01)
        model.observe("cpu", "rec", 2_000, 0.8)  # 0.4 s for one 1,000-unit chunk: long
        for device, expected in (("gpu:0", 2), ("cpu", 1)):
            policy = BatchPolicy(QUEUES)
            mine = _item("rec", 1_000, loop)
            job = _item("rec", 1_000, loop)
            job.priority = BACKGROUND
            policy.submit(mine, 0.0)
            policy.submit(job, 0.0)
            alone = Placement(model=model)
            alone.add_device(device, ("rec",))  # no other device to leave work to
            batch = policy.select(1.0, ("rec",), LIMITS, device=device, placement=alone).batch
            assert batch[0] is mine
            assert len(batch) == expected, device

    asyncio.run(main())
