"""Staging a job's uploads as background work: each stored document is read by a CPU worker at
background priority, charged to the memory budget and checked against the job's decode work
before any frame is decoded, within one deadline for the whole upload, and stopped when the client
hangs up; and a cap on the uploads one key stages at once.

Before (issue 37, item 2): a few tiny animated GIFs (a 13000 x 13000 logical screen, 500
one-pixel frames) had every frame converted at full size, at interactive priority, outside the
budget, for up to `jobs.page_timeout_s` (an hour) each, after their client had gone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from serving.decode.documents import StagingPlan
from serving.decode.readers import DecodeLimits, FileKind
from serving.errors import ClientGone, DeadlineExceeded, PayloadTooLarge, QuotaExceeded
from serving.scheduling.memory_budget import MemoryBudget
from serving.scheduling.priorities import BACKGROUND
from serving.workers import cpu_stages
from serving.workers.cpu_pool import CpuPool

STAGING_BYTES_PER_PX = 16
"""What converting an animated image holds for each pixel of its logical screen: Pillow's canvas
and the previous frame (RGBA), the frame as RGB, its array and its scaled copy (14 B/px
measured on a 4000 x 4000 GIF scaled to 1000 px)."""


class WorkerCounter:
    """A `serving.jobs.files.PageCounter` that reads each document in `cpu`'s workers, through
    the event loop it was made on (make it there), and `cancel()`s from that loop.

    A document that will be decoded (an animated image, converted to a multi-page TIFF) is first
    sized from its headers (`staging_plan`): the job's decoded pixels are held to
    `max_decoded_pixels` (413), and its conversion holds the memory budget for one frame.
    """

    def __init__(
        self,
        cpu: CpuPool,
        limits: DecodeLimits,
        *,
        timeout_s: float,
        budget: MemoryBudget | None = None,
        max_decoded_pixels: int | None = None,
        priority: int = BACKGROUND,
    ) -> None:
        self._cpu = cpu
        self._limits = limits
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._budget = budget
        self._max_decoded_pixels = max_decoded_pixels
        self._priority = priority
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._current: concurrent.futures.Future[int] | None = None
        self._cancelled = False
        self.decoded_pixels = 0
        """Pixels the job's conversions decoded so far."""

    def __call__(self, path: Path, kind: FileKind) -> int:
        """Ready one stored document (on the staging thread); returns its page count.

        Raises:
            PayloadTooLarge: the job's conversions would decode more than `max_decoded_pixels`,
                or one frame could never fit in the memory budget.
            DeadlineExceeded: the upload was not staged within `timeout_s`.
            ClientGone: `cancel()` was called.
        """
        with self._lock:
            if self._cancelled:
                raise ClientGone()
            future = asyncio.run_coroutine_threadsafe(self._stage(str(path), kind), self._loop)
            self._current = future
        try:
            return future.result(timeout=max(0.0, self._deadline - time.monotonic()))
        except concurrent.futures.TimeoutError as err:
            future.cancel()
            raise DeadlineExceeded(
                f"the upload was not staged within {self._timeout_s:g} s (jobs.staging_timeout_s)"
            ) from err
        except concurrent.futures.CancelledError as err:
            raise ClientGone() from err

    def cancel(self) -> None:
        """Stop staging (the client went away): the document being read is dropped, so the pool
        kills the worker still reading it, and no other is read."""
        with self._lock:
            self._cancelled = True
            if self._current is not None:
                self._current.cancel()

    async def _stage(self, path: str, kind: FileKind) -> int:
        plan: StagingPlan = await self._cpu.run(
            cpu_stages.staging_plan, path, kind, self._limits, priority=self._priority
        )
        if not plan.frame_pixels:
            return plan.pages  # nothing to convert: counted is ready
        self.decoded_pixels += plan.decoded_pixels
        cap = self._max_decoded_pixels
        if cap is not None and self.decoded_pixels > cap:
            raise PayloadTooLarge(
                f"converting its {plan.pages} frames decodes {plan.pages} x "
                f"{plan.frame_pixels} pixels (every frame is drawn on the image's whole "
                f"screen); a job's animated images may decode {cap} pixels in all "
                "(jobs.max_staging_pixels): send the frames as a multi-page TIFF or a PDF"
            )
        async with contextlib.AsyncExitStack() as stack:
            held = None
            if self._budget is not None:
                held = await stack.enter_async_context(
                    self._budget.hold(STAGING_BYTES_PER_PX * plan.frame_pixels)
                )
            # Held until the worker is done with it, even after a hang-up (`CpuPool.run`).
            return await self._cpu.run(
                cpu_stages.stage_document,
                path,
                kind,
                self._limits,
                priority=self._priority,
                holding=held,
            )


class UploadSlots:
    """Job uploads being received and staged at once, per client (an API key's id, or the
    client's address with authentication off), each client at most `per_client`."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._held: dict[str, int] = {}

    @contextlib.contextmanager
    def hold(self, client: str) -> Iterator[None]:
        """One slot of `client`'s for the upload inside.

        Raises:
            QuotaExceeded: `client` already has `per_client` uploads in progress (429).
        """
        held = self._held.get(client, 0)
        if held >= self.per_client:
            raise QuotaExceeded(
                f"{held} job uploads of yours are still being received or staged; at most "
                f"{self.per_client} at once (jobs.max_uploads_per_key): retry when one is done"
            )
        self._held[client] = held + 1
        try:
            yield
        finally:
            left = self._held[client] - 1
            if left:
                self._held[client] = left
            else:
                del self._held[client]
