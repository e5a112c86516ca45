"""A device worker pipelines staged predictors: batch n+1 is collated into page-locked memory and
its copy issued while batch n computes. Shown on a fake device with timed copies and kernels,
through the worker's real message loop."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np

from models.engine_options import EngineOptions
from models.registry import EngineChoice
from models.staging import Lane, Slot, StagedPredictor
from serving.workers import shm
from serving.workers.device_worker import DeviceSpec, DeviceWorkerChild, ItemOk, WorkerSetup
from tests.fakes.timed_device import Kernel, TimedDevice

CLASSES = 5


def rec_kernel(x: np.ndarray) -> np.ndarray:
    """Rec-shaped output whose argmax at every step is the batch row's label (x[:, 0, 0, 1])."""
    out = np.zeros((x.shape[0], x.shape[-1] // 8, CLASSES), dtype=np.float32)
    for row in range(x.shape[0]):
        out[row, :, int(x[row, 0, 0, 1]) % CLASSES] = 1.0
    return out


class StagedFake:
    """A staged predictor on a lane over the fake device."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.kernel = Kernel(rec_kernel)
        self.events: list[tuple[str, int]] = []

    def stage(self, shape: tuple[int, ...]) -> Slot:
        return self.lane.stage(shape)

    def launch(self, slot: Slot) -> None:
        self.events.append(("launch", int(slot.input.flat[0])))
        self.lane.launch(slot, self.kernel)

    def run(self, batch: np.ndarray) -> np.ndarray:
        return self.lane.run(batch, self.kernel)

    def close(self) -> None:
        return None


def crops(tag: int, label: int, prefix: str) -> shm.ShmRef:
    data = np.zeros((2, 3, 48, 64), dtype=np.float32)
    data[:, 0, 0, 0] = tag  # the fake device tags operations with a batch's first value
    data[:, 0, 0, 1] = label
    return shm.put(data, prefix)


def test_worker_launches_the_next_batch_before_it_waits_for_the_current_one(prefix) -> None:
    device = TimedDevice(gates={("compute", 1): ("upload", 2)})
    predictor = StagedFake(Lane(device))
    assert isinstance(predictor, StagedPredictor)
    engine = EngineChoice(backend="fake", options=EngineOptions(inflight_batches=2))
    spec = DeviceSpec(name="gpu:0", device="gpu:0", stages=("rec",), engine=engine)
    ours, theirs = multiprocessing.Pipe()
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=ours)
    runner.use({"rec": predictor})
    serving = threading.Thread(target=runner.serve, daemon=True)
    serving.start()
    try:
        # As the main process does with inflight_batches = 2: both sent before any result.
        theirs.send(("run", 10, "rec", [crops(1, 3, prefix)], False))
        theirs.send(("run", 11, "rec", [crops(2, 4, prefix)], False))
        answers = [theirs.recv(), theirs.recv()]
        theirs.send(("stop",))
        serving.join(timeout=10)
    finally:
        device.close()
    assert [(kind, batch_id) for kind, batch_id, *_ in answers] == [("done", 10), ("done", 11)]
    for (_, _, outcomes, _), label in zip(answers, (3, 4), strict=True):
        (outcome,) = outcomes
        assert isinstance(outcome, ItemOk)
        indices, _ = outcome.value
        assert (indices == label).all()
    # Batch 2 was launched, and its copy ran, while batch 1 was still computing.
    assert predictor.events == [("launch", 1), ("launch", 2)]
    assert device.gate_seen == {("compute", 1): True}
    assert device.log.index(("start", ("upload", 2))) < device.log.index(("end", ("compute", 1)))
    assert not serving.is_alive()


def test_a_queued_batch_waits_in_the_pipe_until_a_running_one_ends(prefix) -> None:
    """`queued_batches`: the main process sends a third batch to a worker running two; the
    worker launches it only once the first has ended (never more than `inflight_batches` on
    the lane), and answers all three in order."""
    device = TimedDevice(compute_s=0.05)
    predictor = StagedFake(Lane(device))
    engine = EngineChoice(backend="fake", options=EngineOptions(inflight_batches=2))
    spec = DeviceSpec(
        name="gpu:0", device="gpu:0", stages=("rec",), engine=engine, queued_batches=1
    )
    ours, theirs = multiprocessing.Pipe()
    runner = DeviceWorkerChild(
        spec=spec, setup=WorkerSetup(model_dirs={}, shm_prefix=prefix), conn=ours
    )
    runner.use({"rec": predictor})
    serving = threading.Thread(target=runner.serve, daemon=True)
    serving.start()
    try:
        for tag in (1, 2, 3):
            theirs.send(("run", 10 + tag, "rec", [crops(tag, tag, prefix)], False))
        answers = [theirs.recv() for _ in range(3)]
        theirs.send(("stop",))
        serving.join(timeout=10)
    finally:
        device.close()
    assert [batch_id for _, batch_id, *_ in answers] == [11, 12, 13]
    assert predictor.events == [("launch", 1), ("launch", 2), ("launch", 3)]
    assert device.log.index(("start", ("upload", 3))) > device.log.index(("end", ("compute", 1)))
    assert not serving.is_alive()


class FailingLaunch(StagedFake):
    """Refuses to launch, and fails items whose label is 0 when run synchronously."""

    def launch(self, slot: Slot) -> None:
        raise RuntimeError("launch failed")

    def run(self, batch: np.ndarray) -> np.ndarray:
        if (batch[:, 0, 0, 1] == 0).any():
            raise RuntimeError("bad crop")
        return rec_kernel(batch)


def test_a_batch_that_cannot_launch_runs_again_item_by_item(prefix) -> None:
    device = TimedDevice(copy_s=0.0, compute_s=0.0)
    engine = EngineChoice(backend="fake", options=EngineOptions())
    spec = DeviceSpec(name="gpu:0", device="gpu:0", stages=("rec",), engine=engine)
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=None)  # type: ignore[arg-type]
    lane = Lane(device, max_slots=1)
    runner.use({"rec": FailingLaunch(lane)})
    try:
        running = runner.start_batch("rec", [crops(1, 2, prefix), crops(2, 0, prefix)])
        good, bad = running.finish()
    finally:
        device.close()
    assert isinstance(good, ItemOk)
    assert (good.value[0] == 2).all()
    assert not isinstance(bad, ItemOk)
    assert lane.stage((1, 3, 48, 64)) is not None  # the slot was given back
