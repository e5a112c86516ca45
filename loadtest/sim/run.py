"""One simulation run: builds the real policy objects over the simulated parts and runs the clock.

The server's own `BatchPolicy`, `Placement` (with its `CostModel`) and `Admission` (its clock set
to the virtual one) are used unchanged; only devices, CPU workers and clients are simulated.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loadtest.sim.clients import InteractiveClients, JobFeedSim
from loadtest.sim.config import SimConfig
from loadtest.sim.cpu import CpuPoolSim, HostLoad
from loadtest.sim.devices import DeviceDispatch, SchedulerCounts
from loadtest.sim.events import EventLoop
from loadtest.sim.flow import RequestFlow
from loadtest.sim.stats import Recorder
from loadtest.sim.traffic import TrafficSource
from serving.config import StageLimits
from serving.scheduling.admission import Admission
from serving.scheduling.batching import BatchPolicy, Selection
from serving.scheduling.placement import Placement

TIMELINE_BINS = 120


@dataclass(slots=True)
class SimResult:
    """What one run measured, and what it cost to simulate."""

    config: SimConfig
    recorder: Recorder
    counts: SchedulerCounts
    select_s: float
    """Wall seconds spent inside the real `BatchPolicy.select`."""
    devices: dict[str, tuple[str, float]]
    """Device name -> (kind, compute seconds in the window)."""
    cpu_calls: int
    cpu_skipped: int
    job_pages_done: int
    job_pages_failed: int
    admission_page_s: float | None
    cost_model: list[dict[str, object]]
    events: int
    wall_s: float
    simulated_s: float


class _TimedPolicy(BatchPolicy):
    """The real policy, with the wall time of its `select` calls counted."""

    select_s = 0.0

    def select(
        self,
        now: float,
        stages: Iterable[str],
        limits: Mapping[str, StageLimits],
        *,
        company_possible: bool = True,
        device: str | None = None,
        placement: Placement | None = None,
        hold_background: bool = False,
    ) -> Selection:
        started = time.perf_counter()
        try:
            return super().select(
                now,
                stages,
                limits,
                company_possible=company_possible,
                device=device,
                placement=placement,
                hold_background=hold_background,
            )
        finally:
            self.select_s += time.perf_counter() - started


class Simulation:
    """The simulated server and its clients for one configuration; `run` drives the clock.

    Tests build one and inject requests with `flow.start` at chosen times (`loop.at`).
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        rng = random.Random(config.seed)
        self.loop = EventLoop()
        self.recorder = Recorder(
            start_s=config.window_start_s,
            end_s=config.duration_s,
            bin_s=config.duration_s / TIMELINE_BINS,
        )
        self.policy = _TimedPolicy(config.queues, background_share=config.traffic.job_min_share)
        self.placement = Placement()
        self.admission = Admission(max_pages=config.admission_pages, clock=self.loop.clock)
        load = HostLoad(config.host)
        self.cpu = CpuPoolSim(
            self.loop,
            config.cpu,
            load,
            random.Random(rng.random()),
            self.recorder,
            background_share=config.traffic.job_min_share,
        )
        source = TrafficSource(config.traffic, random.Random(rng.random()))
        # Only makes the items' futures; never run, closed by `run`.
        self.futures = asyncio.new_event_loop()
        self.flow = RequestFlow(
            loop=self.loop,
            futures=self.futures,
            cpu=self.cpu,
            policy=self.policy,
            admission=self.admission,
            recorder=self.recorder,
            timeout_s=config.traffic.timeout_s,
            draw_pages=source.pages,
        )
        self.dispatch = DeviceDispatch(
            loop=self.loop,
            policy=self.policy,
            placement=self.placement,
            use_placement=config.placement,
            devices=list(config.devices),
            admission=self.admission,
            load=load,
            rng=random.Random(rng.random()),
            recorder=self.recorder,
            on_done=self.flow.item_done,
            on_dropped=self.flow.item_dropped,
            hold_background=lambda: self.flow.coming > 0,
        )
        self.flow.dispatch = self.dispatch
        self.clients = InteractiveClients(
            self.loop, self.flow, source, self.recorder, config.duration_s
        )
        self.jobs = JobFeedSim(
            loop=self.loop,
            flow=self.flow,
            source=TrafficSource(config.traffic, random.Random(rng.random())),
            stop_s=config.duration_s,
            max_inflight=config.traffic.job_max_inflight_pages,
            backlog=config.traffic.job_pages,
            timeout_s=config.traffic.job_timeout_s,
        )

    def run(self) -> SimResult:
        """Start the clients, run until everything in flight has ended, return the figures."""
        wall_started = time.perf_counter()
        config = self.config
        self.clients.start()
        if config.traffic.job_pages:
            self.jobs.start()
        try:
            # Traffic stops at the end; whatever is in flight then ends within its deadline.
            self.loop.run(config.duration_s + config.traffic.timeout_s + 1.0)
        finally:
            self.futures.close()
        recorder = self.recorder
        compute: dict[str, tuple[str, float]] = {}
        for state in self.dispatch.devices:
            name = state.model.name
            busy = sum(b.compute_s for (dev, _), b in recorder.batches.items() if dev == name)
            compute[name] = (state.model.kind, float(busy))
        return SimResult(
            config=config,
            recorder=recorder,
            counts=self.dispatch.counts,
            select_s=self.policy.select_s,
            devices=compute,
            cpu_calls=self.cpu.calls,
            cpu_skipped=self.cpu.skipped,
            job_pages_done=self.jobs.pages_done,
            job_pages_failed=self.jobs.pages_failed,
            admission_page_s=self.admission.page_s,
            cost_model=self.placement.model.describe(),
            events=self.loop.events,
            wall_s=time.perf_counter() - wall_started,
            simulated_s=self.loop.now,
        )


def run_simulation(config: SimConfig) -> SimResult:
    """Simulate `config` and return its figures."""
    return Simulation(config).run()
