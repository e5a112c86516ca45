"""Soak traffic: real document pages, each request rescaled by a seeded random factor.

PaddleOCR users who report oneDNN memory leaks send inputs of many sizes: every new input shape
adds kernels to oneDNN's shape cache unless `[engine] mkldnn_cache_capacity` bounds it. So each
request here is a real page (rendered from the Debian doc PDFs) resized by its own factor, drawn
from an RNG seeded with (seed, request index): the same run sends the same sizes.

The first requests send every page once at the largest factor. Allocators (glibc's heap in the CPU
workers, Paddle's in the device worker) keep the room their largest input needed; sending the
largest inputs first lets them reach that high-water mark during the warm-up, so memory that
grows later is growth, not the largest page happening to arrive late.

The first requests also go one at a time (`lone_requests`). A device worker runs a batch on the
model compiled for all the device's threads when its other workers are idle
(`serving.workers.device_pool`, `engine.cpu_lone_threads`), and that second compiled copy keeps
working memory and per-shape state of its own (up to `engine.mkldnn_cache_capacity` shapes).
Under two clients lone batches are rare and come at random; measured alone, the detector's second
copy added ~300 MiB over its first 25 shapes and then stayed flat (2026-12-06,
docs/operations.md). Sending the largest pages and some more sizes alone gives it its share of
the warm-up. It does not remove the server's slower rise over its first ~400 s, which is what
the 8-minute warm-up of `loadtest.soak.run.DURATION_S` is for.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import httpx
import numpy as np

from loadtest.client import Api, Outcome, PreparedRequest, prepare_request, send
from loadtest.documents import Document
from loadtest.progress import ProgressLine
from loadtest.result import LevelResult, summarize

__all__ = ["ScaledPages", "drive"]


@dataclass(frozen=True, slots=True)
class ScaledPages:
    """Request ``i`` is page ``pages[j]`` scaled by ``f``, ``j`` and ``f`` drawn from (seed, i).

    Requests ``0 .. len(pages) - 1`` are each page in turn at ``max_scale``.

    Attributes:
        pages: (label, BGR image) pairs.
        min_scale: Smallest factor.
        max_scale: Largest factor.
        seed: RNG seed.
    """

    pages: Sequence[tuple[str, np.ndarray]]
    min_scale: float = 0.5
    max_scale: float = 1.2
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.pages:
            raise ValueError("no pages")
        if not 0 < self.min_scale <= self.max_scale:
            raise ValueError(f"need 0 < min_scale <= max_scale, got {self.min_scale}..")

    def document(self, index: int) -> Document:
        """Request ``index``'s page as a PNG (fast compression: this runs beside the server)."""
        if index < len(self.pages):
            label, image = self.pages[index]
            factor = self.max_scale
        else:
            rng = np.random.default_rng([self.seed, index])
            label, image = self.pages[int(rng.integers(len(self.pages)))]
            factor = float(rng.uniform(self.min_scale, self.max_scale))
        height, width = image.shape[:2]
        size = (max(1, round(width * factor)), max(1, round(height * factor)))
        shrink = factor < 1
        scaled = cv2.resize(
            image, size, interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
        )
        ok, png = cv2.imencode(".png", scaled, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        if not ok:
            raise RuntimeError(f"cannot encode {label} at {size}")
        name = f"{label}@{size[0]}x{size[1]}"
        return Document(name=name, data=png.tobytes(), kind="image", content_type="image/png")

    def request(self, api: Api, index: int) -> tuple[PreparedRequest, str]:
        """The prepared request ``index`` and the name of its page (label@WxH)."""
        document = self.document(index)
        return prepare_request(api, document), document.name


@dataclass(slots=True)
class _Warmup:
    """When the warm-up ends (`drive`), and with it when traffic stops."""

    started: float
    warmup_s: float
    judged_s: float
    requests: int
    warm_s: float | None = None
    deadline: float = math.inf

    def __post_init__(self) -> None:
        if self.requests == 0:
            self._end(self.warmup_s)

    def answered(self, count: int) -> None:
        if self.warm_s is None and count >= self.requests:
            self._end(max(self.warmup_s, time.monotonic() - self.started))

    def _end(self, warm_s: float) -> None:
        self.warm_s = warm_s
        self.deadline = self.started + warm_s + self.judged_s


@dataclass(slots=True)
class _Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    sizes: set[str] = field(default_factory=set)
    pages: int = 0
    errors: int = 0


async def drive(
    url: str,
    api: Api,
    pages: ScaledPages,
    *,
    concurrency: int,
    duration_s: float,
    lone_requests: int = 0,
    warmup_s: float = 0.0,
    warmup_requests: int = 0,
    timeout_s: float = 300.0,
    progress: bool = True,
) -> tuple[LevelResult, int, float]:
    """Closed loop: the first ``lone_requests`` requests one at a time, then ``concurrency``
    clients, each sending when answered.

    The warm-up ends once ``warmup_s`` have passed and ``warmup_requests`` and the lone requests
    were answered, whichever comes last; traffic then goes on for ``duration_s - warmup_s``, the
    span judged, however long the warm-up took. On a slower machine the same warm-up is the same
    requests, not fewer (a soak that judged from a fixed second judged a slow machine's warm-up).

    Requests are built in a thread (resize and PNG encoding), so the event loop keeps timing the
    others. Requests in flight at the end are awaited, not cancelled.

    Returns:
        The level's figures, the number of distinct page sizes sent, and the seconds from the
        start until the warm-up ended.
    """
    if concurrency < 1 or not duration_s > 0 or min(lone_requests, warmup_requests) < 0:
        raise ValueError("need concurrency >= 1, duration_s > 0 and request counts >= 0")
    if not 0 <= warmup_s <= duration_s:
        raise ValueError(f"need 0 <= warmup_s <= duration_s, got {warmup_s} and {duration_s}")
    result = LevelResult(url=url, api=api, concurrency=concurrency)
    tally = _Tally()
    line = ProgressLine(f"soak {result.label}", total=None, duration_s=duration_s)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    indices = itertools.count()
    started = time.monotonic()
    warm = _Warmup(started, warmup_s, duration_s - warmup_s, max(lone_requests, warmup_requests))

    async def send_one(client: httpx.AsyncClient, index: int) -> None:
        request, size = await asyncio.to_thread(pages.request, api, index)
        outcome = await send(client, api, request, timeout_s=timeout_s)
        tally.outcomes.append(outcome)
        tally.sizes.add(size)
        tally.pages += outcome.pages
        tally.errors += not outcome.ok
        warm.answered(len(tally.outcomes))
        if progress:
            line.update(len(tally.outcomes), tally.pages, tally.errors)

    async def client_loop(client: httpx.AsyncClient) -> None:
        for index in indices:  # shared: each index is taken by exactly one client
            if time.monotonic() >= warm.deadline:
                return
            await send_one(client, index)

    client = httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits, trust_env=False)
    async with client:
        for index in itertools.islice(indices, lone_requests):
            await send_one(client, index)
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(client_loop(client))
    if progress:
        line.finish(len(tally.outcomes), tally.pages, tally.errors)
    summarize(result, tally.outcomes, time.monotonic() - started)
    assert warm.warm_s is not None, "the clients stop only once the warm-up ended"
    return result, len(tally.sizes), warm.warm_s
