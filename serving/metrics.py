"""Prometheus metrics. Every value is observed in the main process, where requests are answered
and batches are dispatched, so the figures are correct across all worker processes."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from serving.scheduling.cost_model import CostModel, size_class

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


class Metrics:
    """The server's metric families, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ocr_requests", "Requests answered.", ["endpoint", "status"], registry=r
        )
        self.key_requests = Counter(
            "ocr_key_requests",
            "Requests per API key id (never the secret; '-': no valid key), by status; 429: the "
            "key went past its quota.",
            ["key", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "ocr_request_seconds",
            "Request latency.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge("ocr_queue_depth", "Items queued.", ["stage"], registry=r)
        self.background_share = Gauge(
            "ocr_background_share",
            "Batch jobs' share of the pool's seconds over the last minutes (decayed).",
            ["pool"],
            registry=r,
        )
        self.queue_wait_seconds = Histogram(
            "ocr_queue_wait_seconds",
            "Time items waited in a batching queue.",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "ocr_batch_size",
            "Rows per predictor call (pages for det, crops for rec/cls).",
            ["stage", "device"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.batch_pages = Histogram(
            "ocr_batch_pages",
            "Pages whose rows share a predictor call (more than one: the batch filled across "
            "pages and requests; `[engine] batching`).",
            ["stage", "device"],
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.alone_batches = Counter(
            "ocr_alone_batches",
            "Batches a device worker ran alone on all its device's threads: the device's other "
            "workers idle, nothing queued (`engine.cpu_lone_threads`).",
            ["stage", "device"],
            registry=r,
        )
        self.inference_seconds = Histogram(
            "ocr_inference_seconds",
            "Batch round trip to a device worker.",
            ["stage", "device"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.device_cpu_seconds = Counter(
            "ocr_device_cpu_seconds",
            "CPU time of the device workers (every thread of each process: the engine's too), by "
            "stage: from receiving a batch to answering it (collating, inference, outputs); "
            'stage="between": outside any batch (releasing engine memory, trimming the heap). '
            "Over pages answered, a stage's core-seconds a page (`loadtest.bench.stage_cost`).",
            ["stage", "device"],
            registry=r,
        )
        self.pages = Counter("ocr_pages", "Pages recognised.", registry=r)
        self.shm_bytes = Counter(
            "ocr_shm_bytes",
            "Bytes moved through shared memory between the CPU workers and the device workers: "
            "model inputs to the devices (uint8 pixels), detection maps back (float16, or uint8).",
            ["stage", "direction"],
            registry=r,
        )
        self.worker_restarts = Counter(
            "ocr_worker_restarts", "Worker processes restarted after dying.", ["kind"], registry=r
        )
        self.jobs = Gauge("ocr_jobs", "Batch jobs in the job store.", ["status"], registry=r)
        self.deliveries = Counter(
            "ocr_deliveries",
            "Attempts of jobs' deliveries by kind (webhook: a signed call; export: the outputs "
            "written to object storage) and outcome: delivered, retried (failed, tried again "
            "later), failed (failed for good: out of time, or no retry can help).",
            ["kind", "outcome"],
            registry=r,
        )
        self.storage_objects = Counter(
            "ocr_storage_objects",
            "Objects jobs read from (inputs) and wrote to (outputs) object storage, by outcome.",
            ["direction", "outcome"],
            registry=r,
        )
        self.cost_estimate = Gauge(
            "ocr_batch_cost_seconds",
            "Cost model: predicted seconds for a batch of the size class's cost, per device.",
            ["device", "stage", "size_class"],
            registry=r,
        )
        # Series that exist from the start, so dashboards and alerts see zeros, not gaps.
        for kind in ("cpu", "device"):
            self.worker_restarts.labels(kind=kind)
        for kind in ("webhook", "export"):
            for outcome in ("delivered", "retried", "failed"):
                self.deliveries.labels(kind=kind, outcome=outcome)

    def observe_cost(
        self, device: str, stage: str, cost: int, seconds: float, model: CostModel
    ) -> None:
        """Export the cost model's estimate for the size class a batch just updated."""
        klass = size_class(cost)
        predicted = model.predict(device, stage, 1 << klass)
        if predicted is not None:
            self.cost_estimate.labels(device=device, stage=stage, size_class=f"2^{klass}").set(
                predicted
            )

    def observe_device_cpu(self, device: str, stage: str, batch_s: float, between_s: float) -> None:
        """Add a device worker's CPU seconds for a batch of `stage` and since its last answer."""
        self.device_cpu_seconds.labels(stage=stage, device=device).inc(max(0.0, batch_s))
        self.device_cpu_seconds.labels(stage="between", device=device).inc(max(0.0, between_s))

    def track_admission(
        self,
        inflight: Callable[[], float],
        page_s: Callable[[], float],
        memory: Callable[[str], float],
    ) -> None:
        """Report admission's pages in flight and measured pace, and the memory budget, when
        scraped (`memory` answers for "used", "total" and "waiting")."""
        r = self.registry
        Gauge("ocr_pages_inflight", "Pages admitted and not done.", registry=r).set_function(
            inflight
        )
        Gauge(
            "ocr_page_pace_seconds",
            "Measured seconds between page completions while busy (0 until measured).",
            registry=r,
        ).set_function(page_s)
        budget = Gauge(
            "ocr_memory_budget",
            "Memory budget for decoded pages: used and total bytes, pages waiting for room.",
            ["state"],
            registry=r,
        )
        for state in ("used", "total", "waiting"):
            budget.labels(state=state).set_function(functools.partial(memory, state))

    def track_background_share(self, pool: str, fraction: Callable[[], float]) -> None:
        """Report batch jobs' share of a pool's recent seconds ("devices", "cpu_workers") when
        scraped: it stays near `jobs.min_share` while requests keep the pool busy."""
        self.background_share.labels(pool=pool).set_function(fraction)

    def track_memory(self, processes: Mapping[str, Callable[[], Iterable[int]]]) -> None:
        """Report, when scraped, the resident memory of each named group of processes (`pids`
        answers the live ones: a worker restarted is a new pid)."""
        gauge = Gauge(
            "ocr_process_resident_bytes",
            "Resident memory of the server's processes: the main one, the CPU workers together, "
            "each device worker (which grows with the largest page it has seen, then levels).",
            ["process"],
            registry=self.registry,
        )
        for name, pids in processes.items():
            gauge.labels(process=name).set_function(functools.partial(_resident_bytes, pids))
        cpu = Gauge(
            "ocr_process_cpu_seconds",
            "CPU time (user + system) of the server's live processes, by the same groups: what "
            "a page costs each, over a run (a worker restarted starts again from 0).",
            ["process"],
            registry=self.registry,
        )
        for name, pids in processes.items():
            cpu.labels(process=name).set_function(functools.partial(_cpu_seconds, pids))

    def track_queue_depth(self, stage: str, depth: Callable[[], int]) -> None:
        """Report a queue's depth when scraped."""
        self.queue_depth.labels(stage=stage).set_function(depth)

    def render(self, *, tenants: bool = True) -> bytes:
        """The text exposition format; without `tenants`, no per-key series (they name every
        tenant: `ocr_key_requests_total{key=...}`)."""
        text = generate_latest(self.registry)
        if tenants:
            return text
        lines = text.split(b"\n")
        return b"\n".join(line for line in lines if not line.startswith(_TENANT_SERIES))


_TENANT_SERIES = (b"ocr_key_requests_total{", b"ocr_key_requests_created{")
"""Samples that carry a key id."""


def _cpu_seconds(pids: Callable[[], Iterable[int]]) -> float:
    total = 0.0
    for pid in pids():
        with contextlib.suppress(psutil.Error):  # it exited since: a restart is under way
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


def _resident_bytes(pids: Callable[[], Iterable[int]]) -> float:
    total = 0
    for pid in pids():
        with contextlib.suppress(psutil.Error):  # it exited since: a restart is under way
            total += psutil.Process(pid).memory_info().rss
    return float(total)
