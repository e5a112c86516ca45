"""The event-loop watchdog: a stuck loop is noticed from another thread, a live one is not."""

from __future__ import annotations

import asyncio
import threading

from serving.workers.watchdog import LoopWatchdog


def test_a_loop_blocked_past_the_limit_is_reported() -> None:
    noticed = threading.Event()
    stalls: list[float] = []

    def on_stall(stalled_s: float) -> None:
        stalls.append(stalled_s)
        noticed.set()

    async def main() -> None:
        watchdog = LoopWatchdog(asyncio.get_running_loop(), 0.3, interval_s=0.05, on_stall=on_stall)
        watchdog.start()
        try:
            # Block the loop thread the way a pipe write to a dead child did; only the watchdog
            # can end the wait.
            assert noticed.wait(60)
        finally:
            watchdog.stop()

    asyncio.run(main())
    assert len(stalls) == 1
    assert stalls[0] > 0.3


def test_a_loop_that_keeps_running_is_left_alone() -> None:
    stalls: list[float] = []

    async def main() -> None:
        watchdog = LoopWatchdog(
            asyncio.get_running_loop(), 5.0, interval_s=0.01, on_stall=stalls.append
        )
        watchdog.start()
        for _ in range(50):  # ~50 heartbeats' worth of a responsive loop
            await asyncio.sleep(0.01)
        watchdog.stop()

    asyncio.run(main())
    assert stalls == []
