"""The memory budget: pages wait first come, first served; a page that never fits is refused."""

from __future__ import annotations

import asyncio

import pytest

from serving.errors import Overloaded, PayloadTooLarge, ShuttingDown
from serving.scheduling.memory_budget import (
    BodyCharge,
    MemoryBudget,
    host_memory_bytes,
)


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


def test_the_host_memory_is_read() -> None:
    """What a page costs is `page_memory.PageCosts` (tests/unit/scheduling/test_page_memory.py)."""
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


def test_a_body_holds_its_copies_until_the_request_ends() -> None:
    budget = MemoryBudget(1000)
    with BodyCharge(budget, copies=2) as charge:
        charge.add(100)
        charge.add(50)
        assert (budget.used_bytes, budget.body_bytes) == (300, 300)
        assert charge.held_bytes == 300
    assert (budget.used_bytes, budget.body_bytes) == (0, 0)


def test_bodies_hold_at_most_half_the_budget_and_never_wait() -> None:
    budget = MemoryBudget(1000)
    with BodyCharge(budget, copies=2) as first, BodyCharge(budget, copies=2) as second:
        first.add(200)  # 400 held
        with pytest.raises(Overloaded, match="memory budget"):
            second.add(60)  # 520 > 500: bodies' share
        assert second.held_bytes == 0
        second.add(50)
        assert budget.body_bytes == 500
    assert budget.used_bytes == 0


def test_bodies_take_only_the_room_pages_leave() -> None:
    async def main() -> None:
        budget = MemoryBudget(1000)
        await budget.acquire(900)  # pages in flight
        with BodyCharge(budget, copies=1) as charge:
            charge.add(100)
            with pytest.raises(Overloaded):
                charge.add(1)
        budget.release(900)
        assert budget.used_bytes == 0

    asyncio.run(main())


def test_a_body_that_could_never_be_held_is_413() -> None:
    budget = MemoryBudget(10 << 20)
    charge = BodyCharge(budget, copies=3)
    charge.check(1 << 20)
    with pytest.raises(PayloadTooLarge, match=r"server\.memory_budget_bytes"):
        charge.check(2 << 20)  # 6 MiB held; bodies may hold 5
    with pytest.raises(PayloadTooLarge):
        charge.add(2 << 20)
    assert budget.used_bytes == 0
    assert BodyCharge(budget, copies=0).held_bytes == 0  # spooled bodies cost nothing here


def test_a_stopping_server_takes_no_body() -> None:
    budget = MemoryBudget(1000)
    budget.abort(ShuttingDown())
    with pytest.raises(ShuttingDown), BodyCharge(budget, copies=1) as charge:
        charge.add(1)


def test_an_answer_stays_within_the_total_and_goes_before_waiting_pages() -> None:
    """An answer is charged within the total (issue 49: it used to be counted past it), waiting
    for room ahead of the pages waiting; pages wait until it is given back
    (`serving.http.answers`)."""

    async def main() -> None:
        budget = MemoryBudget(100)
        first = await budget.acquire_answer(80)
        page = asyncio.create_task(budget.acquire(70))
        second = asyncio.create_task(budget.acquire_answer(40))
        await asyncio.sleep(0)
        assert budget.used_bytes == 80  # before: 120, past the total
        assert budget.waiting == 2
        first.release()
        held = await second  # the answer first, though the page asked before it
        assert budget.used_bytes == 40
        assert not page.done()
        held.release()
        held.release()  # once only
        await page
        assert budget.used_bytes == 70
        budget.release(70)
        assert budget.used_bytes == 0
        with pytest.raises(PayloadTooLarge):
            await budget.acquire_answer(101)

    asyncio.run(main())


def test_the_work_that_made_an_answer_hands_its_charge_on() -> None:
    """`answer_from`: a render's charge becomes its output's, the rest given back; an output
    larger than what made it takes the difference within the total."""

    async def main() -> None:
        budget = MemoryBudget(100)
        await budget.acquire(60)
        held = await budget.answer_from(60, 25)
        assert budget.used_bytes == 25
        await budget.acquire(10)
        bigger = await budget.answer_from(10, 50)
        assert budget.used_bytes == 75
        with pytest.raises(PayloadTooLarge):
            await budget.answer_from(0, 200)
        held.release()
        bigger.release()
        assert budget.used_bytes == 0

    asyncio.run(main())
