"""One load level against an OCR server: warm-up, closed- or open-loop traffic, /metrics deltas."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence

import httpx

from loadtest.client import API_NAMES, Api, Outcome, PreparedRequest, prepare_request, send
from loadtest.documents import Document
from loadtest.progress import ProgressLine
from loadtest.result import LevelResult, count_changed, summarize
from loadtest.schedule import poisson_arrivals
from loadtest.server_metrics import host_costs, scrape_metrics, stage_metrics

__all__ = ["run_level"]

_SCRAPE_TIMEOUT_S = 30.0
_CUT_SCRAPE_TIMEOUT_S = 2.0


class _Traffic:
    """The requests of one phase (warm-up or measurement) and what they gave."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        api: Api,
        requests: Sequence[PreparedRequest],
        *,
        timeout_s: float,
    ) -> None:
        self._client = client
        self._api = api
        self._requests = requests
        self._timeout_s = timeout_s
        self.progress: ProgressLine | None = None
        self.outcomes: list[Outcome] = []
        self.documents: list[int] = []
        """Which document each outcome's request sent (an index into the documents)."""
        self.in_flight = 0
        self.dropped = 0
        self.pages = 0
        self.errors = 0

    async def launch(self, index: int) -> None:
        """Send request ``index`` (cycling through the documents) and record its outcome."""
        # Counted before the first await: a request cancelled at the time bound, even one whose
        # task never started, stays in `in_flight` and is reported as cancelled.
        self.in_flight += 1
        request = self._requests[index % len(self._requests)]
        outcome = await send(self._client, self._api, request, timeout_s=self._timeout_s)
        self.in_flight -= 1
        self.outcomes.append(outcome)
        self.documents.append(index % len(self._requests))
        self.pages += outcome.pages
        self.errors += not outcome.ok
        if self.progress is not None:
            self.progress.update(len(self.outcomes), self.pages, self.errors)

    async def closed_loop(
        self, *, workers: int, requests: int | None, duration_s: float | None
    ) -> None:
        """``workers`` clients, each sending its next request as soon as the last one answers."""
        indices = itertools.count()
        deadline = None if duration_s is None else time.monotonic() + duration_s

        async def worker() -> None:
            for index in indices:  # shared: each index is taken by exactly one worker
                if requests is not None and index >= requests:
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    return
                await self.launch(index)

        async with asyncio.TaskGroup() as group:
            for _ in range(workers):
                group.create_task(worker())

    async def open_loop(
        self,
        *,
        rate_per_s: float,
        seed: int,
        requests: int | None,
        duration_s: float | None,
        max_outstanding: int,
    ) -> None:
        """Poisson arrivals, each request its own task; arrivals over ``max_outstanding`` drop."""
        started = time.monotonic()
        arrivals = poisson_arrivals(rate_per_s, seed=seed, count=requests, duration_s=duration_s)
        async with asyncio.TaskGroup() as group:
            for index, at_s in enumerate(arrivals):
                delay_s = started + at_s - time.monotonic()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                if self.in_flight >= max_outstanding:
                    self.dropped += 1
                    continue
                group.create_task(self.launch(index))


def _check_args(
    api: str,
    documents: Sequence[Document],
    concurrency: int | None,
    rate: float | None,
    requests: int | None,
    duration_s: float | None,
) -> None:
    if api not in API_NAMES:
        raise ValueError(f"api must be one of {', '.join(API_NAMES)}, got {api!r}")
    if not documents:
        raise ValueError("no documents to send")
    if (concurrency is None) == (rate is None):
        raise ValueError("give exactly one of concurrency (closed loop) and rate (open loop)")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if requests is None and duration_s is None:
        raise ValueError("give requests or duration_s: every level must end")
    if requests is not None and requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    if duration_s is not None and not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")


async def _scrape(client: httpx.AsyncClient, *, timeout_s: float) -> str | Exception:
    try:
        async with asyncio.timeout(timeout_s):
            return await scrape_metrics(client, timeout_s=timeout_s)
    except (httpx.HTTPError, TimeoutError) as err:
        return err


async def run_level(
    url: str,
    api: Api,
    documents: Sequence[Document],
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    requests: int | None = None,
    duration_s: float | None = None,
    warmup: int = 0,
    timeout_s: float = 300.0,
    seed: int = 0,
    max_outstanding: int = 256,
    max_time_s: float | None = None,
    progress: bool = False,
    reference: Sequence[Sequence[str]] | None = None,
    query: Mapping[str, str] | None = None,
) -> LevelResult:
    """Run one load level and measure it.

    Args:
        url: The server's base URL (``http://127.0.0.1:8000``).
        api: ``"paddlex"`` (``POST /ocr``) or ``"v1"`` (``POST /v1/ocr``).
        documents: Inputs; request ``i`` sends ``documents[i % len(documents)]``.
        concurrency: Closed loop: this many workers, each sending as soon as answered.
        rate: Open loop: mean Poisson arrivals per second (give this or ``concurrency``).
        requests: Measured requests (open loop: arrivals, dropped ones included).
        duration_s: Stop sending after this long (with ``requests``, whichever comes first).
        warmup: Unmeasured requests sent first (closed loop, ``concurrency`` or 1 workers).
        timeout_s: Bound on each request; a request over it counts as a ``TimeoutError``.
        seed: Seed of the open-loop arrival schedule.
        max_outstanding: Open loop: arrivals while this many requests are in flight are dropped.
        max_time_s: Bound on the level (warm-up included); requests still in flight then are
            cancelled and the result is marked ``truncated``. Only the closing ``/metrics``
            scrape runs past it, for 2 s at most.
        progress: Show a live progress line on stderr.
        reference: Each document's text as the server gives it to a lone request: each
            success is compared with it (``LevelResult.changed``, ``correct_pages_s``).
        query: The ``v1`` API's query options, on every request (``{"model": NAME}``).

    Returns:
        The level's figures, with ``/metrics`` deltas when the server exposes them.

    Raises:
        ValueError: Inconsistent arguments.
    """
    _check_args(api, documents, concurrency, rate, requests, duration_s)
    scrape_timeout_s = min(_SCRAPE_TIMEOUT_S, timeout_s)
    prepared = [prepare_request(api, document, query) for document in documents]
    connections = concurrency if concurrency is not None else max_outstanding
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    result = LevelResult(url=url, api=api, concurrency=concurrency, rate_per_s=rate)
    async with httpx.AsyncClient(
        base_url=url, timeout=timeout_s, limits=limits, trust_env=False
    ) as client:
        measured = _Traffic(client, api, prepared, timeout_s=timeout_s)
        before: str | Exception = RuntimeError("cut by max_time_s before the first scrape")
        started = time.monotonic()
        try:
            async with asyncio.timeout(max_time_s):
                if warmup > 0:
                    warm = _Traffic(client, api, prepared, timeout_s=timeout_s)
                    await warm.closed_loop(
                        workers=concurrency or 1, requests=warmup, duration_s=None
                    )
                    result.warmup_requests = len(warm.outcomes)
                    result.warmup_errors = warm.errors
                before = await _scrape(client, timeout_s=scrape_timeout_s)
                started = time.monotonic()
                if progress:
                    measured.progress = ProgressLine(
                        result.label, total=requests, duration_s=duration_s
                    )
                if concurrency is not None:
                    await measured.closed_loop(
                        workers=concurrency, requests=requests, duration_s=duration_s
                    )
                elif rate is not None:
                    await measured.open_loop(
                        rate_per_s=rate,
                        seed=seed,
                        requests=requests,
                        duration_s=duration_s,
                        max_outstanding=max_outstanding,
                    )
        except TimeoutError:
            result.truncated = True
            result.cancelled = measured.in_flight
        wall_s = time.monotonic() - started
        # Past the time bound, the closing scrape gets only a moment.
        after = await _scrape(
            client, timeout_s=_CUT_SCRAPE_TIMEOUT_S if result.truncated else scrape_timeout_s
        )
    if measured.progress is not None:
        measured.progress.finish(len(measured.outcomes), measured.pages, measured.errors)
    summarize(result, measured.outcomes, wall_s)
    if reference is not None:
        count_changed(result, measured.outcomes, measured.documents, reference)
    result.dropped = measured.dropped
    _add_metrics(result, before, after)
    return result


def _add_metrics(result: LevelResult, before: str | Exception, after: str | Exception) -> None:
    for scrape in (before, after):
        if isinstance(scrape, Exception):
            result.metrics_error = f"GET /metrics: {type(scrape).__name__}: {scrape}"
            return
    try:
        result.metrics = stage_metrics(str(before), str(after))
        result.host = host_costs(str(before), str(after), result.pages)
    except ValueError as err:
        result.metrics_error = f"/metrics is not Prometheus text: {err}"
