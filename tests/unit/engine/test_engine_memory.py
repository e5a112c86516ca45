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
    # 12 (the float32 batch) + 100 (the engine) + 4 (the output): one of them may be reused.
    assert ENGINE_BYTES_PER_PX <= measured <= 12 + ENGINE_BYTES_PER_PX + 4 + 8, measured
    assert det.releases == 2  # before the run, so that it starts from the idle engine, and after


def test_the_engine_releases_after_a_batch_over_its_share_only(prefix: str) -> None:
    det = HungryDet()
    ours, theirs = Pipe()
    engine = EngineChoice(backend="fake", options=EngineOptions())
    spec = DeviceSpec(name="cpu", device="cpu", stages=("det",), engine=engine)
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix, engine_retain_bytes=100 * 64 * 64)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=ours)
    runner.use({"det": det})
    runner.release_above_px = setup.engine_retain_bytes // ENGINE_BYTES_PER_PX  # 64 x 64
    serving = threading.Thread(target=runner.serve)
    serving.start()
    try:
        for batch_id, side in enumerate((64, 96, 32)):
            ref = shm.put(np.zeros((1, 3, side, side), np.float32), prefix)
            theirs.send(("run", batch_id, "det", [ref]))
            _, done_id, outcomes = theirs.recv()
            assert done_id == batch_id
            shm.discard(ref)
            for outcome in outcomes:
                shm.discard(outcome.value)
        theirs.send(("stop",))
    finally:
        serving.join(timeout=30)
    # 64 x 64 fits the worker's share of the budget; 96 x 96 does not; 32 x 32 does. The worker
    # releases right after it sends a batch's answer, before it reads the next batch: read once it
    # has stopped, so the check does not race it.
    assert not serving.is_alive()
    assert det.released_after == [96]
