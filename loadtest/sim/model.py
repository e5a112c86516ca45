"""Simulated hardware for the scheduling simulator: latency models of devices and CPU workers.

Nothing here runs a model: a device is a name, the stages it serves, the batch caps the server
would give it (`serving.config.StageLimits`) and a latency model per stage; CPU workers are a pool
of single-threaded processes whose steps take a modelled time. `loadtest.sim.calibration` holds
the figures measured on this machine and the GPU assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from serving.config import StageLimits

DeviceKind = Literal["cpu", "gpu"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency:
    """Seconds one batch takes: `fixed_s + per_unit_s * cost + per_unit_sq_s * cost**2 / rows`.

    `cost` is the batch's cost as the server counts it (pixels for det; padded width x crops for
    rec and cls). The last term is quadratic in each row's cost: PP-OCRv5's recogniser mixes the
    whole padded line, so a row twice as wide takes more than twice as long.
    """

    fixed_s: float = 0.0
    per_unit_s: float = 0.0
    per_unit_sq_s: float = 0.0

    def seconds(self, cost: int, rows: int) -> float:
        """The batch's time."""
        per_row = cost / max(rows, 1)
        return self.fixed_s + (self.per_unit_s + self.per_unit_sq_s * per_row) * cost


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerThread:
    """The device worker process's one Python thread (`DeviceWorkerChild.serve`), a resource of
    its own: it starts each batch (takes it from the pipe, stages its inputs, launches it) and
    finishes each (waits for it, reads its outputs, puts the detection map into shared memory,
    answers), one step at a time. A batch computes only once started and is answered only once
    finished, so this thread can bound the device when its steps outlast the device's compute.
    Costs per stage, of the batch's cost and rows as `Latency` counts them."""

    start: Mapping[str, Latency]
    finish: Mapping[str, Latency]

    def seconds(self, step: Literal["start", "finish"], stage: str, cost: int, rows: int) -> float:
        """The thread's time for one step of a batch."""
        latency = (self.start if step == "start" else self.finish).get(stage)
        return 0.0 if latency is None else latency.seconds(cost, rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceModel:
    """One device worker as the scheduler sees it, and how long its batches take."""

    name: str
    """Unique worker name, as the server's (`"cpu"`, `"gpu:0"`, `"gpu:0#1"`)."""
    kind: DeviceKind
    stages: tuple[str, ...]
    limits: Mapping[str, StageLimits]
    """Batch caps per stage (`workers.cpu.*` / `workers.gpu.*`)."""
    latency: Mapping[str, Latency]
    """Compute time of a batch, per stage."""
    transfer: Mapping[str, Latency] = field(default_factory=dict)
    """Time before compute can start (IPC, copies in and out): overlaps the previous batch's
    compute when the worker holds more than one batch (`inflight_batches`)."""
    inflight_batches: int = 1
    """Batches the worker runs at once (`workers.<kind>.inflight_batches`)."""
    queued_batches: int = 0
    """Batches sent beyond those, waiting in the worker's pipe (`workers.<kind>.queued_batches`):
    the dispatcher holds `inflight_batches + queued_batches` per worker."""
    thread: WorkerThread | None = None
    """The worker thread's own costs; None: free (its host work is in `transfer`)."""
    threads: int = 0
    """Host cores its math threads use (CPU devices): they compete with the CPU workers when the
    host is shared (`HostModel.cores`)."""
    jitter: float = 0.05
    """Sigma of the lognormal factor on each batch's time."""
    device: str | None = None
    """The device it shares with the other workers of that device (`workers.gpu_instances`), as
    the server's `DeviceSpec.device`; None: a device of its own (`name`). Workers of one device
    each have their own thread and batches, and their batches compute on it one at a time, in
    the order launched (assumed: CUDA time-slices the contexts of different processes; without
    MPS their kernels do not run at once)."""

    @property
    def unit(self) -> str:
        """The device its batches compute on."""
        return self.device or self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuStep:
    """Time of one CPU-worker call: `fixed_s + per_mpx_s * Mpx + per_line_s * lines`."""

    fixed_s: float
    per_mpx_s: float = 0.0
    """Per million pixels of the detector input (decode, resize, copies into shared memory)."""
    per_line_s: float = 0.0
    """Per text line (boxes, crops, rec preprocessing, CTC decode)."""

    def seconds(self, det_pixels: int, lines: int) -> float:
        """The call's time."""
        return self.fixed_s + self.per_mpx_s * det_pixels / 1e6 + self.per_line_s * lines


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuModel:
    """The CPU worker pool (`workers.cpu_workers`) and the four calls a request makes there."""

    workers: int
    sizes: CpuStep
    """`page_sizes`: the document's page sizes from its headers (once per request)."""
    prepare: CpuStep
    """`prepare_page_of`: decode, detector resize and normalise (per page)."""
    after_det: CpuStep
    """`after_det`: DB postprocess, crops, recognition chunks (per page)."""
    finish: CpuStep
    """`finish`: CTC decode and assembly (per page)."""
    priority: bool = True
    """Interactive calls before background ones, as `OcrService` asks the pool; False: first
    come, first served."""
    jitter: float = 0.1

    def seconds_per_page(self, det_pixels: int, lines: int) -> float:
        """CPU-worker seconds one page costs (a one-page request)."""
        steps = (self.sizes, self.prepare, self.after_det, self.finish)
        return sum(step.seconds(det_pixels, lines) for step in steps)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostModel:
    """The host's cores, shared by the CPU workers and CPU devices; None: enough for all."""

    cores: int | None = None


def lognormal_factor(u: float, sigma: float) -> float:
    """A lognormal factor with median 1 from a standard normal draw `u`."""
    return math.exp(sigma * u) if sigma > 0 else 1.0
