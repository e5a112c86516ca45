"""The device worker's batch execution, without a process: collation, splitting, isolation."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np

from models.engine_options import EngineOptions
from models.registry import EngineChoice
from pipelines.rec_postprocess import argmax_pairs
from pipelines.stages import DET, REC
from serving.errors import PredictorFailed
from serving.workers import shm
from serving.workers.device_worker import (
    BatchCpu,
    DeviceSpec,
    DeviceWorkerChild,
    ItemFailed,
    ItemOk,
    WorkerSetup,
)

POISON = 42.0


class FakeRec:
    """Rec-shaped output; raises when any row starts with the poison value."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def run(self, batch: np.ndarray) -> np.ndarray:
        self.batches.append(batch.shape[0])
        if (batch[:, 0, 0, 0] == POISON).any():
            raise RuntimeError("bad crop")
        steps = batch.shape[-1] // 8
        probs = np.zeros((batch.shape[0], steps, 5), dtype=np.float32)
        for row in range(batch.shape[0]):
            probs[row, :, int(batch[row, 0, 0, 1]) % 5] = 1.0
        return probs

    def close(self) -> None:
        return None


class FakeDet:
    def run(self, batch: np.ndarray) -> np.ndarray:
        return batch[:, :1] * 2.0

    def close(self) -> None:
        return None


def worker(prefix: str, **predictors) -> DeviceWorkerChild:
    engine = EngineChoice(backend="fake", options=EngineOptions())
    spec = DeviceSpec(name="cpu", device="cpu", stages=tuple(predictors), engine=engine)
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    w = DeviceWorkerChild(spec=spec, setup=setup, conn=None)  # type: ignore[arg-type]
    w.use(predictors)
    return w


def chunk(rows: int, label: int, prefix: str, poison: bool = False) -> shm.ShmRef:
    data = np.zeros((rows, 3, 48, 320), dtype=np.float32)
    data[:, 0, 0, 1] = label
    if poison:
        data[0, 0, 0, 0] = POISON
    return shm.put(data, prefix)


def test_rec_batch_is_split_back_per_item(prefix) -> None:
    rec = FakeRec()
    w = worker(prefix, rec=rec)
    outcomes = w.run_batch("rec", [chunk(6, 1, prefix), chunk(2, 3, prefix)])
    assert rec.batches == [8]
    assert [type(o) for o in outcomes] == [ItemOk, ItemOk]
    first, second = outcomes[0].value, outcomes[1].value
    assert first[0].shape == (6, 40)
    assert (first[0] == 1).all()
    assert second[0].shape == (2, 40)
    assert (second[0] == 3).all()


class ArgmaxRec(FakeRec):
    """A rec engine that reduces its output where it runs (`models.base.ArgmaxOutput`)."""

    def __init__(self) -> None:
        super().__init__()
        self.argmax = False

    def output_argmax(self) -> None:
        self.argmax = True

    def run(self, batch: np.ndarray) -> np.ndarray:
        probs = super().run(batch)
        if not self.argmax:
            return probs
        return argmax_pairs(probs)


def test_a_rec_engine_that_reduces_is_asked_to_and_read_the_same(prefix) -> None:
    refs = [chunk(6, 1, prefix), chunk(2, 3, prefix)]
    plain = worker(prefix, rec=FakeRec()).run_batch("rec", refs)
    rec = ArgmaxRec()
    w = worker(prefix, rec=rec, det=FakeDet())
    assert rec.argmax
    assert w.stages["det"] is DET  # read whole
    assert w.stages["rec"] is not REC
    reduced = w.run_batch("rec", refs)
    for got, want in zip(reduced, plain, strict=True):
        assert isinstance(got, ItemOk)
        assert isinstance(want, ItemOk)
        np.testing.assert_array_equal(got.value[0], want.value[0])
        np.testing.assert_array_equal(got.value[1], want.value[1])


def test_one_bad_item_fails_alone(prefix) -> None:
    rec = FakeRec()
    w = worker(prefix, rec=rec)
    refs = [chunk(6, 1, prefix), chunk(6, 2, prefix, poison=True), chunk(4, 4, prefix)]
    outcomes = w.run_batch("rec", refs)
    # The whole batch failed once, then each item ran alone.
    assert rec.batches == [16, 6, 6, 4]
    assert isinstance(outcomes[0], ItemOk)
    assert isinstance(outcomes[1], ItemFailed)
    assert isinstance(outcomes[1].error, PredictorFailed)
    assert isinstance(outcomes[2], ItemOk)
    assert (outcomes[2].value[0] == 4).all()


def test_inputs_stay_for_a_retry_and_det_outputs_go_to_shared_memory(prefix) -> None:
    w = worker(prefix, det=FakeDet())
    page = np.full((1, 3, 32, 64), 0.25, dtype=np.float32)
    ref = shm.put(page, prefix)
    (outcome,) = w.run_batch("det", [ref])
    assert isinstance(outcome, ItemOk)
    assert isinstance(outcome.value, shm.ShmRef)
    prob_map = shm.take(outcome.value)
    assert prob_map.shape == (1, 32, 64)
    assert np.allclose(prob_map, 0.5)
    # The worker did not consume its input: the main process frees it once the outcome is in.
    assert np.array_equal(shm.take(ref), page)


def test_wrong_row_count_is_a_failure(prefix) -> None:
    class Short(FakeRec):
        def run(self, batch: np.ndarray) -> np.ndarray:
            return super().run(batch)[:-1]

    w = worker(prefix, rec=Short())
    (outcome,) = w.run_batch("rec", [chunk(3, 1, prefix)])
    assert isinstance(outcome, ItemFailed)


class BusyRec(FakeRec):
    """Spends `busy_s` of CPU time on each batch, as an engine computing would."""

    def __init__(self, busy_s: float) -> None:
        super().__init__()
        self.busy_s = busy_s

    def run(self, batch: np.ndarray) -> np.ndarray:
        end = time.process_time() + self.busy_s
        while time.process_time() < end:
            pass
        return super().run(batch)


def test_each_answer_carries_the_cpu_time_the_batch_cost(prefix) -> None:
    ours, theirs = multiprocessing.Pipe()
    w = worker(prefix, rec=BusyRec(busy_s=0.2))
    w.conn = ours
    serving = threading.Thread(target=w.serve, daemon=True)
    serving.start()
    idle_started = time.process_time()
    try:
        theirs.send(("run", 1, "rec", [chunk(2, 1, prefix)], False))
        first = theirs.recv()
        time.sleep(0.2)  # the worker idles: no CPU time charged to any batch
        theirs.send(("run", 2, "rec", [chunk(2, 2, prefix)], False))
        second = theirs.recv()
        theirs.send(("stop",))
        serving.join(timeout=10)
    finally:
        theirs.close()
    assert not serving.is_alive()
    total_s = time.process_time() - idle_started  # this test process: the worker's thread too
    for (kind, batch_id, outcomes, cpu), sent_id in zip((first, second), (1, 2), strict=True):
        assert (kind, batch_id) == ("done", sent_id)
        assert isinstance(outcomes[0], ItemOk)
        assert isinstance(cpu, BatchCpu)
        assert 0.2 <= cpu.batch_s < total_s
    # What the process used between the two batches is apart from either batch.
    assert second[3].between_s < 0.2
