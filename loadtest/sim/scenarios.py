"""Named simulator configurations (`python -m loadtest.sim --config NAME`).

- `cpu`: this machine as `make bench` loads it: one CPU device (2 threads) and 2 CPU workers
  sharing 2 cores; the bench's 8 measured pages, one a request, 4 clients in a closed loop.
- `cpu-alone` / `cpu+job`: the same machine at half its capacity (Poisson), without and with a
  background job at full speed; `cpu-c2` / `cpu-c2+job`: the same with 2 closed-loop clients
  instead, as the bench's job-impact level.
- `gpu` / `gpu+cpu` / `gpu+cpu-noplace`: one GPU, without and with the CPU device as a second
  device (placement on, then off), on the same open-loop traffic.
- `8gpu-64cpu` / `8gpu-64cpu-noplace`: 8 GPUs and 64 CPU workers at 1,000 pages/s, placement
  on (simulated for at most 60 s: see `DURATION_CAPS_S`) and off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from loadtest.sim.calibration import (
    H100_FP32_EAGER,
    GpuProfile,
    cpu_device,
    cpu_workers,
    gpu_devices,
)
from loadtest.sim.config import SimConfig, default_queues
from loadtest.sim.model import DeviceModel, HostModel
from loadtest.sim.traffic import TrafficConfig
from serving.config import BatchingSetting, QueueConfig, WorkersConfig
from serving.scheduling.batch_shapes import batching_mode

BENCH_CLIENT_GAP_S = 0.3
"""The bench's client between an answer and its next request: at c=1 it did 0.196 pages/s (5.1 s a
request) with a p50 of 4.53 s (README), so about 0.3-0.5 s went to the client and HTTP."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioOptions:
    """Overrides from the command line; None keeps the scenario's own value."""

    duration_s: float = 3600.0
    seed: int = 1
    gpu: GpuProfile = H100_FP32_EAGER
    """The assumed GPU (`calibration.GPU_PROFILES`)."""
    rate_pages_s: float | None = None
    concurrency: int | None = None
    placement: bool | None = None
    max_inflight_pages: int | None = None
    rec_max_wait_ms: float | None = None
    gpu_inflight_batches: int | None = None
    gpu_queued_batches: int | None = None
    gpu_instances: int = WorkersConfig().gpu_instances
    """Device worker processes per GPU (`workers.gpu_instances`), sharing it."""
    inflight_pages_per_gpu: int | None = None
    cpu_priority: bool = True
    rec_width_multiple: int | None = None
    batching: BatchingSetting = "auto"
    """`[engine] batching`: "auto" is bucketed where a GPU serves, as the server decides."""
    job_max_inflight_pages: int | None = None
    job_min_share: float | None = None
    job_pages: int | None = None
    uncapped: bool = False
    """Simulate the whole duration even where `DURATION_CAPS_S` caps it."""


def _cpu_machine(
    name: str, description: str, traffic: TrafficConfig, o: ScenarioOptions
) -> SimConfig:
    return SimConfig(
        name=name,
        description=description,
        devices=(cpu_device(),),
        cpu=cpu_workers(2, priority=o.cpu_priority),
        host=HostModel(cores=2),
        traffic=traffic,
    )


def _cpu(o: ScenarioOptions) -> SimConfig:
    traffic = TrafficConfig(concurrency=4, bench_pages=True, client_gap_s=BENCH_CLIENT_GAP_S)
    return _cpu_machine("cpu", "this machine under `make bench`'s c=4 level", traffic, o)


def _cpu_open(name: str, description: str, job_pages: int, o: ScenarioOptions) -> SimConfig:
    traffic = TrafficConfig(rate_pages_s=0.1, bench_pages=True, job_pages=job_pages)
    return _cpu_machine(name, description, traffic, o)


def _cpu_alone(o: ScenarioOptions) -> SimConfig:
    return _cpu_open("cpu-alone", "this machine, Poisson 0.1 pages/s (half its capacity)", 0, o)


def _cpu_job(o: ScenarioOptions) -> SimConfig:
    description = "this machine, Poisson 0.1 pages/s and a background job at full speed"
    return _cpu_open("cpu+job", description, -1, o)


def _cpu_closed(name: str, description: str, job_pages: int, o: ScenarioOptions) -> SimConfig:
    traffic = TrafficConfig(
        concurrency=2, bench_pages=True, client_gap_s=BENCH_CLIENT_GAP_S, job_pages=job_pages
    )
    return _cpu_machine(name, description, traffic, o)


def _cpu_c2(o: ScenarioOptions) -> SimConfig:
    return _cpu_closed("cpu-c2", "this machine, 2 clients (the bench's job-impact level)", 0, o)


def _cpu_c2_job(o: ScenarioOptions) -> SimConfig:
    description = "this machine, 2 clients and a background job at full speed"
    return _cpu_closed("cpu-c2+job", description, -1, o)


GPU_TRAFFIC = TrafficConfig(
    rate_pages_s=25.0,
    burst_every_s=300.0,
    burst_s=20.0,
    burst_factor=2.0,
    cancel_share=0.02,
    job_pages=-1,
    job_max_inflight_pages=8,
    timeout_s=300.0,
)
"""Open-loop documents of 1-10 pages at about half one GPU's capacity (`H100_FP32_EAGER`, an
assumption), bursts of 2x for 20 s every 5 minutes, 2% of clients leaving early, and an endless
job."""


def _gpu_devices(index: int, o: ScenarioOptions) -> list[DeviceModel]:
    return gpu_devices(
        index,
        o.gpu,
        instances=o.gpu_instances,
        inflight_batches=o.gpu_inflight_batches,
        queued_batches=o.gpu_queued_batches,
    )


def _gpu_box(name: str, description: str, with_cpu: bool, o: ScenarioOptions) -> SimConfig:
    devices = _gpu_devices(0, o)
    if with_cpu:
        devices.append(cpu_device(threads=2))
    return SimConfig(
        name=name,
        description=description,
        devices=tuple(devices),
        cpu=cpu_workers(14, priority=o.cpu_priority),
        host=HostModel(cores=16),
        traffic=GPU_TRAFFIC,
    )


def _gpu(o: ScenarioOptions) -> SimConfig:
    return _gpu_box("gpu", "one GPU, 14 CPU workers on 16 cores", False, o)


def _gpu_cpu(o: ScenarioOptions) -> SimConfig:
    return _gpu_box("gpu+cpu", "one GPU and the CPU device (2 threads), placement on", True, o)


def _gpu_cpu_noplace(o: ScenarioOptions) -> SimConfig:
    config = _gpu_box("gpu+cpu-noplace", "one GPU and the CPU device, placement off", True, o)
    return replace(config, placement=False)


def _eight_gpus(o: ScenarioOptions) -> SimConfig:
    traffic = replace(GPU_TRAFFIC, rate_pages_s=1000.0, job_pages=0, burst_every_s=600.0)
    return SimConfig(
        name="8gpu-64cpu",
        description="8 GPUs and 64 CPU workers at 1,000 pages/s, placement on",
        devices=tuple(device for i in range(8) for device in _gpu_devices(i, o)),
        cpu=cpu_workers(64, priority=o.cpu_priority),
        traffic=traffic,
    )


def _eight_gpus_noplace(o: ScenarioOptions) -> SimConfig:
    config = _eight_gpus(o)
    description = "8 GPUs and 64 CPU workers at 1,000 pages/s, placement off"
    return replace(config, name="8gpu-64cpu-noplace", description=description, placement=False)


SCENARIOS: dict[str, Callable[[ScenarioOptions], SimConfig]] = {
    "cpu": _cpu,
    "cpu-alone": _cpu_alone,
    "cpu+job": _cpu_job,
    "cpu-c2": _cpu_c2,
    "cpu-c2+job": _cpu_c2_job,
    "gpu": _gpu,
    "gpu+cpu": _gpu_cpu,
    "gpu+cpu-noplace": _gpu_cpu_noplace,
    "8gpu-64cpu": _eight_gpus,
    "8gpu-64cpu-noplace": _eight_gpus_noplace,
}

DURATION_CAPS_S = {"8gpu-64cpu": 60.0}
"""Simulated seconds at most, unless `uncapped`: with placement on among 8 devices the real
`BatchPolicy.select` takes about 4 ms a call here (README, Scheduling simulator), so an hour would
take hours of wall time."""


def build(name: str, options: ScenarioOptions) -> SimConfig:
    """The named configuration with the command line's overrides applied.

    Raises:
        KeyError: no configuration of that name.
    """
    config = SCENARIOS[name](options)
    traffic = config.traffic
    if options.rate_pages_s is not None:
        traffic = replace(traffic, rate_pages_s=options.rate_pages_s)
    if options.concurrency is not None:
        traffic = replace(traffic, concurrency=options.concurrency)
    if options.rec_width_multiple is not None:
        traffic = replace(traffic, rec_width_multiple=options.rec_width_multiple)
    kinds = [device.kind for device in config.devices]
    traffic = replace(traffic, batching=batching_mode(options.batching, kinds))
    if options.job_pages is not None:
        traffic = replace(traffic, job_pages=options.job_pages)
    if options.job_max_inflight_pages is not None:
        traffic = replace(traffic, job_max_inflight_pages=options.job_max_inflight_pages)
    if options.job_min_share is not None:
        traffic = replace(traffic, job_min_share=options.job_min_share)
    queues = dict(config.queues)
    if options.rec_max_wait_ms is not None:
        rec = queues.get("rec", QueueConfig())
        queues["rec"] = replace(rec, max_wait_ms=options.rec_max_wait_ms)
    duration_s = options.duration_s
    cap = DURATION_CAPS_S.get(name)
    if cap is not None and not options.uncapped:
        duration_s = min(duration_s, cap)
    return replace(
        config,
        traffic=traffic,
        queues=queues or default_queues(),
        duration_s=duration_s,
        seed=options.seed,
        placement=config.placement if options.placement is None else options.placement,
        max_inflight_pages=options.max_inflight_pages or config.max_inflight_pages,
        inflight_pages_per_gpu=(
            config.inflight_pages_per_gpu
            if options.inflight_pages_per_gpu is None
            else options.inflight_pages_per_gpu
        ),
    )
