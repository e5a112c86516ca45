"""A sticky CUDA error in a real device worker process (`models.device_faults`): the process
exits with `DEVICE_FAULT_EXIT_CODE`, readiness drops, the pool starts a fresh process and the
batch it held runs again there. The fault is a model-free fake (`tests.fakes.predictors`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.bundle import load_bundle
from models.device_faults import is_device_fault
from models.engine_options import EngineOptions
from models.registry import EngineChoice
from serving.config import QueueConfig, StageLimits
from serving.scheduling.batching import Scheduler
from serving.workers import shm
from serving.workers.device_pool import DevicePool, DeviceWorkerHandle
from serving.workers.device_worker import DEVICE_FAULT_EXIT_CODE, DeviceSpec, WorkerSetup
from tests.fakes.work import work_item

LIMITS = {"rec": StageLimits(max_batch_size=4, max_cost=100_000)}


@pytest.mark.parametrize(
    ("message", "fatal"),
    [
        ("CUDA error: an illegal memory access was encountered", True),
        ("CUDA error: device-side assert triggered", True),
        ("(External) CUDA error(719), unspecified launch failure.", True),
        ("cudaErrorIllegalAddress", True),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
        ("CUDA error: out of memory", False),
        ("expected an NCHW batch", False),
    ],
)
def test_sticky_cuda_errors_are_device_faults(message: str, fatal: bool) -> None:
    assert is_device_fault(RuntimeError(message)) is fatal
    wrapped = ValueError("rec model failed on (1, 3, 48, 320)")  # as the engines wrap theirs
    wrapped.__cause__ = RuntimeError(message)
    assert is_device_fault(wrapped) is fatal


async def _fault_once(tmp_path: Path, prefix: str) -> dict[str, Any]:
    bundle = load_bundle(det="embedded:PP-OCRv5_mobile_det", rec="embedded:PP-OCRv5_mobile_rec")
    engine = EngineChoice(
        backend="tests.fakes.predictors:CUDA_FAULT", options=EngineOptions(device="cpu")
    )
    spec = DeviceSpec(name="cpu", device="cpu", stages=("det", "rec"), engine=engine)
    worker = DeviceWorkerHandle(
        spec=spec,
        limits=LIMITS,
        setup=WorkerSetup(model_dirs=bundle.model_dirs, shm_prefix=prefix),
        start_timeout_s=120.0,
    )
    scheduler = Scheduler({"rec": QueueConfig(max_wait_ms=0.0, max_queue_len=10)})
    pool = DevicePool([worker], scheduler, restart_backoff_s=0.0)
    await pool.start()
    first = worker.process
    try:
        (tmp_path / "fault").touch()  # the next batch faults, and would every batch after it
        loop = asyncio.get_running_loop()
        item = work_item(
            loop,
            payload=shm.put(np.zeros((1, 3, 48, 320), dtype=np.float32), prefix),
            deadline=1e12,
        )
        scheduler.submit(item)
        readiness = []
        while not item.future.done():
            readiness.append(pool.ready)
            await asyncio.sleep(0.05)
        return {
            "outcome": item.future.result(),
            "exit_code": first.exitcode if first is not None else None,
            "fresh_process": worker.process is not first,
            "restarts": pool.restarts,
            "was_unready": not all(readiness),
            "ready_after": pool.ready,
        }
    finally:
        await pool.stop()


def test_a_device_fault_ends_the_worker_and_its_batch_runs_on_a_fresh_one(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCR_FAKE_CUDA_FAULT_FILE", str(tmp_path / "fault"))
    seen = asyncio.run(asyncio.wait_for(_fault_once(tmp_path, prefix), 300))
    assert seen["exit_code"] == DEVICE_FAULT_EXIT_CODE
    assert seen["fresh_process"] is True
    assert seen["restarts"] == 1
    assert seen["was_unready"] is True  # /readyz dropped while the worker restarted
    assert seen["ready_after"] is True
    indices, _ = seen["outcome"]  # the batch ran again on the fresh process
    assert len(indices) == 1


class StickyOps:
    """`models.staging.DeviceOps` whose work fails with a sticky CUDA error, reported (as CUDA
    reports kernel errors) when the host next waits on an event, and at every wait after."""

    def __init__(self) -> None:
        self.faulted = False

    def new_stream(self) -> None:
        return None

    def pinned_host(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def record(self, stream: Any) -> StickyOps:
        return self

    def synchronize(self) -> None:
        if self.faulted:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def wait(self, stream: Any, event: Any) -> None:
        return None

    def upload(self, host: np.ndarray, stream: Any) -> np.ndarray:
        return host

    def compute(self, fn: Any, x: np.ndarray, stream: Any) -> np.ndarray:
        self.faulted = True
        return np.zeros((x.shape[0], 8, 5), dtype=np.float32)

    def output_shape(self, y: np.ndarray) -> tuple[int, ...]:
        return tuple(y.shape)

    def download(self, y: np.ndarray, host: np.ndarray, stream: Any) -> None:
        return None


class FaultingLane:
    """A staged predictor on `StickyOps`; it must never be asked to run a batch again."""

    def __init__(self) -> None:
        from models.staging import Lane

        self.lane = Lane(StickyOps())

    def stage(self, shape: tuple[int, ...]) -> Any:
        return self.lane.stage(shape)

    def launch(self, slot: Any) -> None:
        self.lane.launch(slot, lambda x: x)

    def run(self, batch: np.ndarray) -> np.ndarray:
        raise AssertionError("a device fault must not be retried in the same process")

    def close(self) -> None:
        return None


def test_a_staged_batch_with_a_device_fault_is_not_retried_in_process(prefix: str) -> None:
    from serving.workers.device_worker import DeviceFault, DeviceWorkerChild

    engine = EngineChoice(backend="fake", options=EngineOptions())
    spec = DeviceSpec(name="gpu:0", device="gpu:0", stages=("rec",), engine=engine)
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=None)  # type: ignore[arg-type]
    predictor = FaultingLane()
    runner.use({"rec": predictor})
    ref = shm.put(np.zeros((1, 3, 48, 64), dtype=np.float32), prefix)
    try:
        batch = runner.start_batch("rec", [ref])
        with pytest.raises(RuntimeError) as raised:
            batch.finish()
        assert is_device_fault(raised.value)
        chain = [raised.value, raised.value.__cause__, raised.value.__context__]
        assert any(isinstance(e, DeviceFault) for e in chain)
    finally:
        predictor.close()
