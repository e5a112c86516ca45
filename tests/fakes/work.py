"""Work items for tests of the scheduling policy and the pools it feeds."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from serving.scheduling.batching import WorkItem
from serving.scheduling.priorities import INTERACTIVE


def work_item(
    loop: asyncio.AbstractEventLoop,
    *,
    stage: str = "rec",
    cost: int = 320,
    bucket: Hashable | None = None,
    count: int = 1,
    priority: int = INTERACTIVE,
    deadline: float = 1e9,
    payload: Any = None,
) -> WorkItem:
    """An item awaited on a fresh future of `loop`; its bucket is its cost unless given."""
    return WorkItem(
        stage=stage,
        bucket=cost if bucket is None else bucket,
        payload=payload,
        count=count,
        cost=cost,
        priority=priority,
        deadline=deadline,
        future=loop.create_future(),
    )
