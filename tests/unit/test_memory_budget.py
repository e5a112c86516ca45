"""The memory budget: pages wait first come, first served; a page that never fits is refused."""

from __future__ import annotations

import asyncio

import pytest

from pipelines.types import DetParams
from serving.errors import PayloadTooLarge, ShuttingDown
from serving.scheduling.memory_budget import MemoryBudget, host_memory_bytes, page_cost_bytes


def test_pages_beyond_the_budget_wait_their_turn_in_order() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        order: list[str] = []

        async def page(name: str, nbytes: int, release: asyncio.Event) -> None:
            async with budget.hold(nbytes):
                order.append(name)
                assert budget.used_bytes <= budget.total_bytes
                await release.wait()

        gates = {name: asyncio.Event() for name in "abcd"}
        tasks = [
            asyncio.create_task(page("a", 60, gates["a"])),
            asyncio.create_task(page("b", 60, gates["b"])),
            asyncio.create_task(page("c", 10, gates["c"])),  # fits, but waits behind b
            asyncio.create_task(page("d", 30, gates["d"])),
        ]
        await asyncio.sleep(0)
        assert order == ["a"]
        assert budget.waiting == 3
        gates["a"].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert order == ["a", "b", "c", "d"]
        assert budget.used_bytes == 100
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        assert budget.used_bytes == 0

    asyncio.run(main())


def test_a_page_that_could_never_fit_is_refused_with_413() -> None:
    budget = MemoryBudget(1 << 30)
    with pytest.raises(PayloadTooLarge) as info:
        budget.check(2 << 30)
    assert info.value.http_status == 413
    assert "server.memory_budget_bytes" in info.value.message


def test_a_waiter_that_goes_away_gives_its_turn_to_those_behind() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        await budget.acquire(90)
        big = asyncio.create_task(budget.acquire(50))
        small = asyncio.create_task(budget.acquire(10))
        await asyncio.sleep(0)
        assert budget.waiting == 2
        big.cancel()
        await asyncio.gather(big, return_exceptions=True)
        await small
        assert budget.used_bytes == 100
        assert budget.waiting == 0

    asyncio.run(main())


def test_a_page_costs_its_pixels_and_its_detector_input() -> None:
    det = DetParams(limit_side_len=64, limit_type="min", max_side_limit=4000)
    # 92 x 92 inches at 144 dpi: the 10-page PDF that once took 12 GB.
    side = 92 * 144
    cost = page_cost_bytes(side, side, det)
    assert cost == 7 * side * side + 16 * 4000 * 4000
    assert page_cost_bytes(800, 300, det) == 7 * 800 * 300 + 16 * 800 * 288
    assert host_memory_bytes() > 0


def test_abort_fails_the_waiting_pages_and_refuses_new_ones() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        await budget.acquire(100)
        waiting = asyncio.create_task(budget.acquire(10))
        await asyncio.sleep(0)
        assert budget.abort(ShuttingDown()) == 1
        with pytest.raises(ShuttingDown):
            await waiting
        with pytest.raises(ShuttingDown):
            await budget.acquire(1)
        budget.release(100)
        assert budget.used_bytes == 0

    asyncio.run(main())
