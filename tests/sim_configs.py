"""A simulator config for exact timelines: no clients of its own (tests inject requests), no
randomness in any time, CPU steps of 0.1-0.3 s."""

from __future__ import annotations

from dataclasses import replace

from loadtest.sim.config import SimConfig
from loadtest.sim.model import CpuModel, CpuStep, DeviceModel
from loadtest.sim.traffic import TrafficConfig
from serving.config import QueueConfig


def tiny_config(*devices: DeviceModel, workers: int = 1, **changes: object) -> SimConfig:
    """`devices` and `workers` CPU workers, with `changes` to any other field."""
    config = SimConfig(
        name="tiny",
        description="test",
        devices=devices,
        cpu=CpuModel(
            workers=workers,
            sizes=CpuStep(fixed_s=0.1),
            prepare=CpuStep(fixed_s=0.2),
            after_det=CpuStep(fixed_s=0.3),
            finish=CpuStep(fixed_s=0.1),
            jitter=0.0,
        ),
        traffic=TrafficConfig(timeout_s=100.0),
        queues={stage: QueueConfig() for stage in ("det", "rec", "cls")},
        duration_s=100.0,
        warmup_s=0.0,
    )
    return replace(config, **changes)  # type: ignore[arg-type]
