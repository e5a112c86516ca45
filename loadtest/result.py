"""The figures of one load level (requests, errors, throughput, latency percentiles, batching)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from loadtest.client import Api, Outcome
from loadtest.server_metrics import HostCosts, StageMetrics

__all__ = ["LevelResult", "count_changed", "percentile", "summarize"]


@dataclass(slots=True, kw_only=True)
class LevelResult:
    """One load level: a concurrency (closed loop) or an arrival rate (open loop).

    Latencies are of successful requests only; throughput counts what completed in ``wall_s``,
    from the first measured request to the last answer (warm-up excluded).

    Attributes:
        url: The server.
        api: ``"paddlex"`` or ``"v1"``.
        concurrency: Closed-loop workers, or ``None`` for an open-loop level.
        rate_per_s: Open-loop mean arrivals per second, or ``None``.
        requests: Requests answered (successes plus errors).
        successes: Requests that succeeded.
        errors: Failed requests by cause: ``http_<status>``, ``errorCode_<code>``,
            ``invalid_body`` or a transport exception's type name.
        dropped: Open-loop arrivals not sent because ``max_outstanding`` were in flight.
        cancelled: Requests still in flight when ``max_time_s`` ran out.
        truncated: ``max_time_s`` ran out before the level finished.
        warmup_requests: Unmeasured requests sent first.
        warmup_errors: How many of those failed.
        pages: Pages in successful responses.
        wall_s: Measured duration.
        throughput_pages_s: ``pages / wall_s``.
        throughput_requests_s: ``requests / wall_s``.
        p50_s: Median latency of successes (``None`` without successes); likewise p95/p99/max.
        mean_s: Mean latency of successes.
        metrics: Per-stage ``/metrics`` deltas, ``None`` when the server has none.
        metrics_error: Why ``metrics`` is ``None``.
        host: Core-seconds and shared-memory bytes per page (``/metrics`` deltas), ``None``
            when the server does not export them.
    """

    url: str
    api: Api
    concurrency: int | None = None
    rate_per_s: float | None = None
    requests: int = 0
    successes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    cancelled: int = 0
    truncated: bool = False
    warmup_requests: int = 0
    warmup_errors: int = 0
    pages: int = 0
    wall_s: float = 0.0
    throughput_pages_s: float = 0.0
    throughput_requests_s: float = 0.0
    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None
    mean_s: float | None = None
    metrics: dict[str, StageMetrics] | None = None
    metrics_error: str | None = None
    host: HostCosts | None = None
    changed: int | None = None
    """Successes whose text differs from the server's own answer to a lone request (`run_level`'s
    `reference`); ``None`` without a reference."""
    correct_pages_s: float | None = None
    """Pages per second of the successes with the reference's text: what a client can use."""

    @property
    def label(self) -> str:
        """``"c=4"`` for a closed-loop level, ``"rate=0.5/s"`` for an open-loop one."""
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        return f"rate={self.rate_per_s:g}/s"

    @property
    def error_count(self) -> int:
        """Failed requests, all causes."""
        return sum(self.errors.values())


def count_changed(
    result: LevelResult,
    outcomes: Sequence[Outcome],
    documents: Sequence[int],
    reference: Sequence[Sequence[str]],
) -> None:
    """Fill ``result.changed`` and ``result.correct_pages_s``: each success's text against
    ``reference[document]``, the text the same server gave that document alone."""
    correct_pages = changed = 0
    for outcome, document in zip(outcomes, documents, strict=True):
        if not outcome.ok:
            continue
        if outcome.texts is not None and list(outcome.texts) == list(reference[document]):
            correct_pages += outcome.pages
        else:
            changed += 1
    result.changed = changed
    result.correct_pages_s = correct_pages / result.wall_s if result.wall_s > 0 else 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation), ``None`` for no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summarize(result: LevelResult, outcomes: Sequence[Outcome], wall_s: float) -> None:
    """Fill ``result``'s counts, throughput and latency figures from the measured outcomes."""
    latencies = [o.latency_s for o in outcomes if o.ok]
    result.requests = len(outcomes)
    result.successes = len(latencies)
    causes = Counter(o.error or "unknown" for o in outcomes if not o.ok)
    result.errors = dict(sorted(causes.items()))
    result.pages = sum(o.pages for o in outcomes)
    result.wall_s = wall_s
    if wall_s > 0:
        result.throughput_pages_s = result.pages / wall_s
        result.throughput_requests_s = result.requests / wall_s
    result.p50_s = percentile(latencies, 50)
    result.p95_s = percentile(latencies, 95)
    result.p99_s = percentile(latencies, 99)
    result.max_s = max(latencies, default=None)
    result.mean_s = sum(latencies) / len(latencies) if latencies else None
