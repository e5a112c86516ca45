"""What a device worker's engine costs per detector pixel, and that it gives back what a big page
made it keep."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

import numpy as np

from models.engine_options import EngineOptions
from models.registry import EngineChoice
from pipelines.stages import DET
from serving.engine.warmup import measure_det_bytes_per_px
from serving.workers import shm
from serving.workers.device_worker import DeviceSpec, DeviceWorkerChild, WorkerSetup

ENGINE_BYTES_PER_PX = 100


class HungryDet:
    """A detector that touches `ENGINE_BYTES_PER_PX` bytes a pixel while it runs, and counts the
    times it is asked to release what it keeps (and the side of the batch it ran last then)."""

    def __init__(self) -> None:
        self.releases = 0
        self.last_side = 0
        self.released_after: list[int] = []

    def run(self, batch: np.ndarray) -> np.ndarray:
        self.last_side = batch.shape[3]
        pixels = batch.shape[0] * batch.shape[2] * batch.shape[3]
        working = np.ones(pixels * ENGINE_BYTES_PER_PX, np.uint8)
        del working
        return batch[:, :1] * 2.0

    def release_memory(self) -> None:
        self.releases += 1
        self.released_after.append(self.last_side)

    def close(self) -> None:
        return None


def test_measured_bytes_per_pixel_cover_the_batch_the_engine_and_the_output() -> None:
    det = HungryDet()
    measured = measure_det_bytes_per_px(det, DET.output, side_px=1024)
    assert measured is not None
    # 12 (the float32 batch) + 100 (the engine) + 4 (the output): one of them may be reused;
    # 8 for the map's post-processing, and 4 for the heap's own growth after the rest of the
    # suite ran in this process (125.3 seen in a full run, 116-124 alone).
    assert ENGINE_BYTES_PER_PX <= measured <= 12 + ENGINE_BYTES_PER_PX + 4 + 8 + 4, measured
    assert det.releases == 2  # before the run, so that it starts from the idle engine, and after


class TwoModelDet(HungryDet):
    """A detector compiled twice (`models.base.AloneRunner`): it records which model each batch
    ran on, "alone" or "own"."""

    def __init__(self) -> None:
        super().__init__()
        self.models: list[str] = []

    def run(self, batch: np.ndarray) -> np.ndarray:
        self.models.append("own")
        return super().run(batch)

    def run_alone(self, batch: np.ndarray) -> np.ndarray:
        self.models.append("alone")
        return super().run(batch)


def serve_batches(
    det: HungryDet, prefix: str, batches: list[tuple[int, bool]], retain_side: int = 64
) -> None:
    """A device worker on `det` runs a det batch of each (side, alone) in turn, then stops;
    `retain_side`: the side of the largest input whose working memory the worker may keep."""
    ours, theirs = Pipe()
    engine = EngineChoice(backend="fake", options=EngineOptions(lone_threads=2))
    spec = DeviceSpec(name="cpu", device="cpu", stages=("det",), engine=engine)
    retain = ENGINE_BYTES_PER_PX * retain_side * retain_side
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix, engine_retain_bytes=retain)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=ours)
    runner.use({"det": det})
    runner.release_above_px = setup.engine_retain_bytes // ENGINE_BYTES_PER_PX
    serving = threading.Thread(target=runner.serve)
    serving.start()
    try:
        for batch_id, (side, alone) in enumerate(batches):
            ref = shm.put(np.zeros((1, 3, side, side), np.float32), prefix)
            theirs.send(("run", batch_id, "det", [ref], alone))
            _, done_id, outcomes, _ = theirs.recv()
            assert done_id == batch_id
            shm.discard(ref)
            for outcome in outcomes:
                shm.discard(outcome.value)
        theirs.send(("stop",))
    finally:
        serving.join(timeout=30)
    # The worker releases right after it sends a batch's answer, before it reads the next
    # batch: read once it has stopped, so that checks do not race it.
    assert not serving.is_alive()


def test_the_engine_releases_after_a_batch_over_its_share_only(prefix: str) -> None:
    det = HungryDet()
    serve_batches(det, prefix, [(64, False), (96, False), (32, False)])
    # 64 x 64 fits the worker's share of the budget; 96 x 96 does not; 32 x 32 does.
    assert det.released_after == [96]


def test_a_detector_compiled_twice_keeps_memory_in_one_model_at_a_time(prefix: str) -> None:
    det = TwoModelDet()
    sides = [40, 48, 56, 32, 24]
    serve_batches(det, prefix, list(zip(sides, [False, False, True, True, False], strict=True)))
    assert det.models == ["own", "own", "alone", "alone", "own"]
    # Released before each batch that runs on the other model than the last one did: the
    # side of the batch run before it; none of them is over the worker's share.
    assert det.released_after == [48, 32]


def test_a_detector_compiled_once_runs_lone_batches_as_any(prefix: str) -> None:
    det = HungryDet()  # no `run_alone`
    serve_batches(det, prefix, [(40, False), (48, True), (32, False)])
    assert det.releases == 0


def test_a_worker_reports_lone_threads_only_where_a_predictor_can_run_alone(prefix: str) -> None:
    ours, _theirs = Pipe()
    engine = EngineChoice(backend="fake", options=EngineOptions(cpu_threads=1, lone_threads=2))
    spec = DeviceSpec(name="cpu#0", device="cpu", stages=("det",), engine=engine)
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=ours)
    runner.use({"det": TwoModelDet()})
    assert runner.lone_threads() == 2
    runner.use({"det": HungryDet()})  # an engine compiled once: the dispatcher sends none alone
    assert runner.lone_threads() == 0
