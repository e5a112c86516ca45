"""Server-side batching figures: `/metrics` histograms scraped around a run, reported as deltas."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "BATCH_SIZE",
    "CPU_SECONDS",
    "QUEUE_WAIT",
    "SHM_BYTES",
    "HistogramSeries",
    "HostCosts",
    "StageMetrics",
    "host_costs",
    "parse_histograms",
    "scrape_metrics",
    "stage_metrics",
    "subtract",
]

BATCH_SIZE = "ocr_batch_size"
QUEUE_WAIT = "ocr_queue_wait_seconds"
CPU_SECONDS = "ocr_process_cpu_seconds"
SHM_BYTES = "ocr_shm_bytes"

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]
"""A histogram series: metric name and its labels (without ``le``), sorted."""


@dataclass(frozen=True, slots=True)
class HistogramSeries:
    """One histogram series: cumulative bucket counts by upper bound, sum and count."""

    buckets: dict[float, float]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class StageMetrics:
    """Batching of one stage during a run (all devices together).

    Attributes:
        batches: Predictor calls (``ocr_batch_size`` observations).
        mean_batch_size: Mean rows per call, ``None`` without calls.
        batch_size_histogram: Calls per bucket (not cumulative), keyed by the bucket's upper
            bound as Prometheus writes it (``"4"``, ``"+Inf"``).
        queue_waits: Items that waited in the stage's queue (``ocr_queue_wait_seconds``).
        mean_queue_wait_s: Mean queue wait, ``None`` without items.
    """

    batches: int = 0
    mean_batch_size: float | None = None
    batch_size_histogram: dict[str, int] = field(default_factory=dict)
    queue_waits: int = 0
    mean_queue_wait_s: float | None = None


def parse_histograms(text: str, names: Collection[str]) -> dict[SeriesKey, HistogramSeries]:
    """The series of the histograms ``names`` in a Prometheus text exposition.

    Raises:
        ValueError: The text is not in the Prometheus format.
    """
    buckets: dict[SeriesKey, dict[float, float]] = {}
    sums: dict[SeriesKey, float] = {}
    counts: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in names:
            continue
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            key = (family.name, labels)
            suffix = sample.name[len(family.name) :]
            if suffix == "_bucket":
                buckets.setdefault(key, {})[float(sample.labels["le"])] = sample.value
            elif suffix == "_sum":
                sums[key] = sample.value
            elif suffix == "_count":
                counts[key] = sample.value
    return {
        key: HistogramSeries(buckets.get(key, {}), sums.get(key, 0.0), counts[key])
        for key in counts
    }


def subtract(
    after: dict[SeriesKey, HistogramSeries], before: dict[SeriesKey, HistogramSeries]
) -> dict[SeriesKey, HistogramSeries]:
    """What was observed between two scrapes.

    A series that is new, or whose count went down (the server restarted), counts in full.
    """
    delta: dict[SeriesKey, HistogramSeries] = {}
    for key, now in after.items():
        then = before.get(key)
        if then is None or now.count < then.count:
            delta[key] = now
            continue
        delta[key] = HistogramSeries(
            {le: value - then.buckets.get(le, 0.0) for le, value in now.buckets.items()},
            now.sum - then.sum,
            now.count - then.count,
        )
    return delta


def format_le(bound: float) -> str:
    """A bucket bound as Prometheus writes it: ``"4"``, ``"0.25"``, ``"+Inf"``."""
    if math.isinf(bound):
        return "+Inf"
    return str(int(bound)) if bound.is_integer() else repr(bound)


def _by_stage(
    series: dict[SeriesKey, HistogramSeries], name: str
) -> dict[str, tuple[dict[float, float], float, float]]:
    merged: dict[str, tuple[dict[float, float], float, float]] = {}
    for (metric, labels), one in series.items():
        if metric != name:
            continue
        stage = dict(labels).get("stage", "")
        buckets, total, count = merged.get(stage, ({}, 0.0, 0.0))
        for le, value in one.buckets.items():
            buckets[le] = buckets.get(le, 0.0) + value
        merged[stage] = (buckets, total + one.sum, count + one.count)
    return merged


def stage_metrics(before_text: str, after_text: str) -> dict[str, StageMetrics]:
    """Per-stage batch sizes and queue waits observed between two ``/metrics`` scrapes.

    Raises:
        ValueError: A scrape is not in the Prometheus format.
    """
    names = (BATCH_SIZE, QUEUE_WAIT)
    delta = subtract(parse_histograms(after_text, names), parse_histograms(before_text, names))
    sizes = _by_stage(delta, BATCH_SIZE)
    waits = _by_stage(delta, QUEUE_WAIT)
    result: dict[str, StageMetrics] = {}
    for stage in sorted(sizes.keys() | waits.keys()):
        buckets, size_sum, batches = sizes.get(stage, ({}, 0.0, 0.0))
        histogram: dict[str, int] = {}
        previous = 0.0
        for le in sorted(buckets):
            histogram[format_le(le)] = round(buckets[le] - previous)
            previous = buckets[le]
        _, wait_sum, waited = waits.get(stage, ({}, 0.0, 0.0))
        result[stage] = StageMetrics(
            batches=round(batches),
            mean_batch_size=size_sum / batches if batches else None,
            batch_size_histogram=histogram,
            queue_waits=round(waited),
            mean_queue_wait_s=wait_sum / waited if waited else None,
        )
    return result


@dataclass(frozen=True, slots=True)
class HostCosts:
    """What a run's pages cost the server's host, per page (issue 31: the CPU-side limit).

    Attributes:
        core_s: CPU core-seconds a page in each group of processes: ``main``, ``cpu_workers``,
            ``devices`` (every device worker; the engines' own threads count here).
        shm_bytes: Bytes a page moved through shared memory between the CPU and device
            workers, by ``<stage> <direction>`` (``to_device``, ``from_device``), and ``total``.
    """

    core_s: dict[str, float]
    shm_bytes: dict[str, float]


def _samples(text: str, names: Collection[str]) -> dict[SeriesKey, float]:
    values: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in names:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            values[(family.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def host_costs(before_text: str, after_text: str, pages: int) -> HostCosts | None:
    """Core-seconds and shared-memory bytes per page between two ``/metrics`` scrapes
    (``ocr_process_cpu_seconds``, ``ocr_shm_bytes``); None without pages or those metrics (an
    older server). A process restarted meanwhile counts from 0.

    Raises:
        ValueError: A scrape is not in the Prometheus format.
    """
    names = (CPU_SECONDS, SHM_BYTES)
    before, after = _samples(before_text, names), _samples(after_text, names)
    if pages <= 0 or not any(name == CPU_SECONDS for name, _ in after):
        return None
    core_s: dict[str, float] = {}
    shm_bytes: dict[str, float] = {}
    for (name, labels), value in after.items():
        then = before.get((name, labels), 0.0)
        delta = value - then if value >= then else value
        tags = dict(labels)
        if name == CPU_SECONDS:
            process = tags.get("process", "")
            group = process if process in ("main", "cpu_workers") else "devices"
            core_s[group] = core_s.get(group, 0.0) + delta / pages
        else:
            key = f"{tags.get('stage', '')} {tags.get('direction', '')}"
            shm_bytes[key] = shm_bytes.get(key, 0.0) + delta / pages
    shm_bytes["total"] = sum(shm_bytes.values())
    return HostCosts(
        core_s={k: round(v, 4) for k, v in sorted(core_s.items())},
        shm_bytes={k: round(v) for k, v in sorted(shm_bytes.items())},
    )


async def scrape_metrics(client: httpx.AsyncClient, *, timeout_s: float) -> str:
    """``GET /metrics`` as text.

    Raises:
        httpx.HTTPError: The request failed or the status was not 2xx.
    """
    response = await client.get("/metrics", timeout=timeout_s)
    response.raise_for_status()
    return response.text
