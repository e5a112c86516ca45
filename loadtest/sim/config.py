"""One simulated server and its traffic: devices, CPU workers, queues, admission, placement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from loadtest.sim.model import CpuModel, DeviceModel, HostModel
from loadtest.sim.traffic import TrafficConfig
from serving.config import QueueConfig, ServerConfig, WorkersConfig
from serving.scheduling.admission import admission_pages


def default_queues(workers: WorkersConfig | None = None) -> dict[str, QueueConfig]:
    """The server's queue settings (`workers.{det,rec,cls}_queue`)."""
    config = workers or WorkersConfig()
    return {stage: config.queue(stage) for stage in ("det", "rec", "cls")}


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything one simulation run needs."""

    name: str
    description: str
    devices: tuple[DeviceModel, ...]
    cpu: CpuModel
    traffic: TrafficConfig
    host: HostModel = field(default_factory=HostModel)
    queues: Mapping[str, QueueConfig] = field(default_factory=default_queues)
    max_inflight_pages: int = ServerConfig().max_inflight_pages
    """`server.max_inflight_pages`: the admission cap without GPUs."""
    inflight_pages_per_gpu: int = ServerConfig().inflight_pages_per_gpu
    """`server.inflight_pages_per_gpu`: added to the cap for each GPU device."""
    placement: bool = True
    """Placement by expected finish time; False: plain work pulling (`placement=None`)."""
    duration_s: float = 3600.0
    """Traffic runs this long; then the run drains what is in flight."""
    warmup_s: float | None = None
    """Left out of the figures; None: a tenth of the duration, at most 300 s."""
    seed: int = 1

    @property
    def admission_pages(self) -> int:
        """The admission cap as the server computes it (`admission.admission_pages`)."""
        gpus = len({device.unit for device in self.devices if device.kind == "gpu"})
        return admission_pages(self.max_inflight_pages, self.inflight_pages_per_gpu, gpus)[0]

    @property
    def window_start_s(self) -> float:
        """Start of the measured window."""
        if self.warmup_s is not None:
            return self.warmup_s
        return min(300.0, self.duration_s / 10)
