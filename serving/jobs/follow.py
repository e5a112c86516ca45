"""Results streams woken for pages other replicas finish: one look at the store for all of them.

A page that ends in this server wakes the streams following its job (`JobEvents`). On a store
replicas share, a page another replica finishes wakes nothing here, so each stream used to read
its job again every `jobs.poll_interval_s`, over the replica's one locked connection
(`PostgresJobStore`): a few hundred streams kept that connection busy, and the runner's claims
and commits waited behind them (issue 49, item 4). Now `watch_shared_store` reads, every poll
interval, the progress of every job followed here in one query, and wakes the followers of the
jobs that changed; the streams themselves only wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from serving.errors import OcrError

logger = logging.getLogger(__name__)


class Progress(Protocol):
    """What the watcher reads (`JobStore.progress`)."""

    def progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]: ...


class Followed(Protocol):
    """The followers' events (`serving.jobs.runner.JobEvents`)."""

    def watched(self) -> list[str]: ...

    def notify(self, job_id: str) -> None: ...


async def watch_shared_store(store: Progress, events: Followed, interval_s: float) -> None:
    """Every `interval_s`, wake the followers of each followed job whose status or finished
    pages changed since the last look (or that is new to the watch: its follower may have read
    the store just before a change). Runs until cancelled."""
    seen: dict[str, tuple[str, int] | None] = {}
    while True:
        await asyncio.sleep(interval_s)
        watched = events.watched()
        if not watched:
            seen.clear()
            continue
        try:
            progress = await asyncio.to_thread(store.progress, watched)
        except OcrError as err:  # unreachable for now: the next look tries again
            logger.debug("followed jobs not read: %s", err.message)
            continue
        for job_id in watched:
            now = progress.get(job_id)
            if job_id not in seen or seen[job_id] != now:
                events.notify(job_id)
            seen[job_id] = now
        for job_id in set(seen) - set(watched):
            del seen[job_id]
