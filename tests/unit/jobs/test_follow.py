"""`serving.jobs.follow`: one look at a shared store for every followed job, waking the
followers of those that changed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from serving.jobs.follow import watch_shared_store
from serving.jobs.runner import JobEvents


class _Store:
    def __init__(self) -> None:
        self.jobs = {"a": ("running", 0), "b": ("running", 0)}
        self.looks: list[list[str]] = []

    def progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        self.looks.append(sorted(job_ids))
        return {job_id: self.jobs[job_id] for job_id in job_ids if job_id in self.jobs}


@pytest.mark.anyio
async def test_one_look_for_every_followed_job_wakes_only_those_that_changed() -> None:
    store, events = _Store(), JobEvents()
    watcher = asyncio.create_task(watch_shared_store(store, events, 0.01))
    try:
        a, b = events.watch("a"), events.watch("b")
        await asyncio.wait_for(asyncio.gather(a.wait(), b.wait()), 5)  # new to the watch
        a, b = events.watch("a"), events.watch("b")
        await asyncio.sleep(0.05)
        assert not a.is_set()  # nothing changed: nobody woken
        assert not b.is_set()
        store.jobs["b"] = ("running", 1)
        await asyncio.wait_for(b.wait(), 5)
        assert not a.is_set()
        assert all(look == ["a", "b"] for look in store.looks[:2])  # one look for both
    finally:
        watcher.cancel()
