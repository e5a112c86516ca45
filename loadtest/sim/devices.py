"""Simulated device workers driving the real policy: `BatchPolicy.select` decides, `Placement`
learns and places, exactly as `serving.workers.device_pool.DevicePool._serve` and
`serving.scheduling.batching.Scheduler.next_batch` use them.

Each device has `inflight_batches + queued_batches` feeders (the server's dispatch tasks). An
idle feeder asks `select` for a batch sized for its device; with a batch it calls
`placement.started` and sends it (the transfer: pipe and copies, in parallel with everything
else); when the batch's answer comes back the feeder calls `placement.finished` with the time
measured as the server measures it, hands the items' results over, asks again at once, and wakes
the other feeders. Every submit wakes the idle feeders too, in the order they began to wait (an
`asyncio.Event`'s order); a feeder told to wait until `wake_at` is woken then. Where `select`
asks to look again *now* (placement leaves a batch to a device that should already be free), the
server's `next_batch` loops with a zero timeout until something changes: here that feeder looks
again every `SPIN_RECHECK_S`, and the time spent so is reported as spin.

The worker, as `DeviceWorkerChild.serve` runs it: batches wait in its pipe; its one thread
starts the pipe's head while fewer than `inflight_batches` run, else finishes the oldest once
computed (a batch waiting in the pipe first, as `serve` takes the pipe first); the device
computes started batches one after another. Where the model has a `thread`, its start and finish
take time and the thread does one at a time; without one both are instant. Workers of one device
(`workers.gpu_instances`, `DeviceModel.device`) each have their own feeders, pipe and thread, and
share the device's clock: their started batches compute one at a time, in the order launched.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from loadtest.sim.cpu import HostLoad
from loadtest.sim.events import EventLoop
from loadtest.sim.model import DeviceModel, lognormal_factor
from loadtest.sim.stats import Recorder
from serving.scheduling.admission import Admission
from serving.scheduling.batching import BatchPolicy, WorkItem
from serving.scheduling.placement import Placement

SPIN_RECHECK_S = 0.005


@dataclass(slots=True, eq=False)
class Feeder:
    """One dispatch task of one device."""

    device: DeviceState
    index: int
    generation: int = 0
    """Bumped whenever the feeder is woken, so stale timers are ignored."""


@dataclass(slots=True, eq=False)
class DeviceClock:
    """One device's compute, shared by its workers."""

    busy_until: float = 0.0
    """When the device ends the last batch started on it."""


@dataclass(slots=True, eq=False)
class DeviceState:
    """A device worker's batches in flight, its device's clock and its thread."""

    model: DeviceModel
    clock: DeviceClock = field(default_factory=DeviceClock)
    last_done_at: float = 0.0
    inflight: list[_Batch] = field(default_factory=list)
    """Sent and not yet answered."""
    pipe: deque[_Batch] = field(default_factory=deque)
    """Arrived at the worker, not yet started."""
    running: deque[_Batch] = field(default_factory=deque)
    """Started, not yet finished, oldest first."""
    thread_busy: bool = False
    feeders: list[Feeder] = field(default_factory=list)

    @property
    def threads(self) -> int:
        """Host cores its math uses (CPU devices)."""
        return self.model.threads

    def delay(self, seconds: float) -> None:
        """CPU-worker calls took cores from it: its batches end `seconds` later."""
        for batch in self.inflight:
            if batch.started:
                batch.end += seconds
                batch.compute_s += seconds
            else:
                batch.delayed_s += seconds
        if self.running:
            self.clock.busy_until += seconds


@dataclass(slots=True, eq=False)
class _Batch:
    feeder: Feeder
    items: list[WorkItem]
    stage: str
    cost: int
    rows: int
    token: int
    sent_at: float
    factor: float
    """Its lognormal jitter, drawn when sent."""
    delayed_s: float = 0.0
    """Delays (`DeviceState.delay`) before it started, added to its compute."""
    started: bool = False
    computed: bool = False
    begin: float = 0.0
    compute_s: float = 0.0
    end: float = 0.0


@dataclass(slots=True)
class SchedulerCounts:
    """How often the real policy was consulted."""

    selects: int = 0
    """`select` calls made."""
    selects_skipped: int = 0
    """Calls the server would make that the simulator skips because their answer is known:
    nothing queued for the feeder's stages, or a feeder of the same device just got nothing."""
    spin_rechecks: int = 0
    """Looks again because `select` said "now" (a busy loop in the server)."""


class DeviceDispatch:
    """All devices and their feeders over one `BatchPolicy` and one `Placement`."""

    def __init__(
        self,
        *,
        loop: EventLoop,
        policy: BatchPolicy,
        placement: Placement,
        use_placement: bool,
        devices: list[DeviceModel],
        admission: Admission,
        load: HostLoad,
        rng: random.Random,
        recorder: Recorder,
        on_done: Callable[[WorkItem], None],
        on_dropped: Callable[[WorkItem], None],
        hold_background: Callable[[], bool] = lambda: False,
    ) -> None:
        self.loop = loop
        self.hold_background = hold_background
        self.policy = policy
        self.placement = placement
        self._place = placement if use_placement else None
        self.admission = admission
        self.load = load
        self.rng = rng
        self.recorder = recorder
        self.on_done = on_done
        self.on_dropped = on_dropped
        self.counts = SchedulerCounts()
        self.devices: list[DeviceState] = []
        self._idle: dict[Feeder, None] = {}
        """Idle feeders in the order they began to wait."""
        self._round_pending = False
        clocks: dict[str, DeviceClock] = {}
        for model in devices:
            state = DeviceState(model, clocks.setdefault(model.unit, DeviceClock()))
            placement.add_device(model.name, model.stages)
            for index in range(model.inflight_batches + model.queued_batches):
                feeder = Feeder(state, index)
                state.feeders.append(feeder)
                self._idle[feeder] = None
            self.devices.append(state)

    def changed(self) -> None:
        """Something was submitted or freed: wake the idle feeders (once per instant)."""
        if not self._round_pending and self._idle:
            self._round_pending = True
            self.loop.soon(self._round)

    def _round(self, _: object) -> None:
        self._round_pending = False
        refused: set[str] = set()
        for feeder in list(self._idle):
            if feeder not in self._idle:
                continue
            name = feeder.device.model.name
            if name in refused:
                self.counts.selects_skipped += 1
                continue
            if not self._try(feeder):
                refused.add(name)
            else:
                refused.clear()

    def _timer(self, arg: tuple[Feeder, int]) -> None:
        feeder, generation = arg
        if feeder.generation == generation and feeder in self._idle:
            self._try(feeder)

    def _try(self, feeder: Feeder) -> bool:
        """Ask the policy for a batch for `feeder`; start it, or wait. True if it took one."""
        feeder.generation += 1
        model = feeder.device.model
        policy = self.policy
        if not any(policy.depth(stage) for stage in model.stages):
            self.counts.selects_skipped += 1
            return False
        now = self.loop.now
        self.counts.selects += 1
        selection = policy.select(
            now,
            model.stages,
            model.limits,
            company_possible=self.admission.inflight > 1,
            device=model.name,
            placement=self._place,
            hold_background=self.hold_background(),
        )
        for item in selection.dropped:
            self.recorder.dropped_items += 1
            if not item.future.done():
                self.on_dropped(item)
        if selection.batch:
            self._start(feeder, selection.batch)
            self.changed()
            return True
        if selection.wake_at is not None:
            wake = selection.wake_at
            if wake <= now:
                self.counts.spin_rechecks += 1
                wake = now + SPIN_RECHECK_S
            self.loop.at(wake, self._timer, (feeder, feeder.generation))
        return False

    def _start(self, feeder: Feeder, items: list[WorkItem]) -> None:
        """`feeder` sends `items` to its device's worker."""
        self._idle.pop(feeder, None)
        device = feeder.device
        model = device.model
        now = self.loop.now
        stage = items[0].stage
        cost = rows = 0
        for item in items:
            cost += item.cost
            rows += item.count
            self.recorder.wait(stage, now - item.enqueued_at, now)
        token = self.placement.started(model.name, stage, cost, now)
        transfer = model.transfer.get(stage)
        arrive = now + (transfer.seconds(cost, rows) if transfer is not None else 0.0)
        factor = lognormal_factor(self.rng.gauss(0.0, 1.0), model.jitter)
        batch = _Batch(feeder, items, stage, cost, rows, token, now, factor)
        device.inflight.append(batch)
        if len(device.inflight) == 1 and model.threads:
            self.load.device_started(device, now)
        self.loop.at(arrive, self._arrived, batch)

    def _arrived(self, batch: _Batch) -> None:
        device = batch.feeder.device
        device.pipe.append(batch)
        self._work(device)

    def _work(self, device: DeviceState) -> None:
        """The worker's thread, if free, takes its next step (`DeviceWorkerChild.serve`)."""
        while not device.thread_busy:
            if device.pipe and len(device.running) < device.model.inflight_batches:
                self._step(device, "start", device.pipe.popleft())
            elif device.running and device.running[0].computed:
                self._step(device, "finish", device.running.popleft())
            else:
                return

    def _step(self, device: DeviceState, step: Literal["start", "finish"], batch: _Batch) -> None:
        thread = device.model.thread
        seconds = (
            0.0 if thread is None else thread.seconds(step, batch.stage, batch.cost, batch.rows)
        )
        done = self._launch if step == "start" else self._answer
        if seconds <= 0:
            done(batch)
            return
        device.thread_busy = True
        self.recorder.thread(device.model.name, self.loop.now, seconds)
        self.loop.at(self.loop.now + seconds, self._stepped, (done, batch))

    def _stepped(self, arg: tuple[Callable[[_Batch], None], _Batch]) -> None:
        done, batch = arg
        device = batch.feeder.device
        device.thread_busy = False
        done(batch)
        self._work(device)

    def _launch(self, batch: _Batch) -> None:
        """The batch computes after those started before it."""
        device = batch.feeder.device
        clock = device.clock
        begin = max(self.loop.now, clock.busy_until)
        compute = device.model.latency[batch.stage].seconds(batch.cost, batch.rows)
        batch.started = True
        batch.begin = begin
        batch.compute_s = compute * batch.factor + batch.delayed_s
        batch.end = begin + batch.compute_s
        clock.busy_until = batch.end
        device.running.append(batch)
        self.loop.at(batch.end, self._computed, batch)

    def _computed(self, batch: _Batch) -> None:
        if self.loop.now < batch.end:  # delayed by CPU-worker calls since it was scheduled
            self.loop.at(batch.end, self._computed, batch)
            return
        batch.computed = True
        self._work(batch.feeder.device)

    def _answer(self, batch: _Batch) -> None:
        """The worker answered `batch`: its feeder hands the results over and asks again."""
        now = self.loop.now
        feeder = batch.feeder
        device = feeder.device
        model = device.model
        # As `DevicePool._serve` measures it: from the send, or from the previous answer.
        seconds = now - max(batch.sent_at, device.last_done_at)
        device.last_done_at = now
        device.inflight.remove(batch)
        if not device.inflight and model.threads:
            self.load.device_stopped(device)
        self.recorder.batch(
            model.name,
            batch.stage,
            batch.rows,
            len(batch.items),
            batch.cost,
            batch.begin,
            batch.compute_s,
        )
        self.placement.finished(model.name, batch.token, batch.stage, batch.cost, seconds)
        for item in batch.items:
            if not item.future.done():
                item.future.set_result(None)
                self.on_done(item)
        self._idle[feeder] = None
        self._try(feeder)
        self.changed()
