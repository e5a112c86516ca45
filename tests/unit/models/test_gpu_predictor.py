"""Paddle's GPU data path (`models.gpu_predictor`) against a fake of Paddle's GPU build that logs
each call with the stream it was issued on."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pytest

from models.base import ArgmaxOutput, PredictorError, PredictorNotLoadedError
from models.engine_options import EngineOptions
from models.gpu_predictor import GpuPredictor
from models.paddle_device import paddle_lane
from models.registry import EngineChoice
from models.spec import ModelSpec
from models.staging import StagedPredictor
from pipelines.rec_postprocess import argmax_pairs
from serving.workers import shm
from serving.workers.device_worker import DeviceSpec, DeviceWorkerChild, ItemOk, WorkerSetup
from tests.fakes.paddle_gpu import Log, make_fake_paddle


@pytest.fixture(autouse=True)
def _fresh_lanes() -> Iterator[None]:
    yield
    paddle_lane.cache_clear()


def _loaded(spec: ModelSpec, paddle: ModuleType, device: str = "gpu:0") -> GpuPredictor:
    # Two batches in flight, as `workers.gpu.inflight_batches` sends by default.
    predictor = GpuPredictor(spec, EngineOptions(device=device, inflight_batches=2), paddle)
    predictor.load()
    return predictor


def _batch(seed: int, rows: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=(rows, 3, 48, 64)).astype(np.float32)


def test_an_instance_runs_its_predictors_on_one_compute_stream(rec_spec, det_spec) -> None:
    log = Log()
    paddle = make_fake_paddle(log)
    det = _loaded(det_spec, paddle, "gpu:1")
    rec = _loaded(rec_spec, paddle, "gpu:1")
    streams = log.named("Stream")
    assert [s["device"] for s in streams] == ["gpu:1"] * 3  # copy in, compute, copy out
    lane = paddle_lane(paddle, 1, inflight_batches=2)
    assert [s["exec_stream"] for s in log.named("set_exec_stream")] == [
        lane.compute_stream.stream_base
    ] * 2
    assert [g["device_id"] for g in log.named("enable_use_gpu")] == [1, 1]
    order = log.names()
    assert order.index("set_exec_stream") < order.index("create_predictor")
    assert isinstance(det, StagedPredictor)
    assert isinstance(rec, ArgmaxOutput)


def test_a_batch_is_collated_into_pinned_memory_and_copied_without_blocking(rec_spec) -> None:
    log = Log()
    predictor = _loaded(rec_spec, make_fake_paddle(log))
    lane = paddle_lane(predictor._paddle, 0, inflight_batches=2)
    slot = predictor.stage((2, 3, 48, 64))
    assert log.is_pinned(slot.input)
    slot.input[...] = _batch(1)
    log.calls.clear()
    predictor.launch(slot)
    (upload,) = log.named("Tensor.cuda")
    (download,) = log.named("Tensor.copy_")
    (run,) = log.named("Predictor.run")
    # The copy in reads the slot's page-locked memory itself: no host copy between.
    assert upload["source"] is slot.input or np.shares_memory(upload["source"], slot.input)
    assert upload["blocking"] is False
    assert download["blocking"] is False
    assert upload["stream"] == lane.upload_stream.name
    assert run["stream"] == lane.compute_stream.name
    assert run["place"] == "gpu:0"
    assert download["stream"] == lane.download_stream.name
    assert log.is_pinned(download["target"])
    waits = {(w["on"], w["recorded_on"]) for w in log.named("Stream.wait_event")}
    assert waits == {
        (lane.compute_stream.name, lane.upload_stream.name),
        (lane.download_stream.name, lane.compute_stream.name),
    }
    assert not log.named("Event.synchronize")  # launch waits for nothing
    result = slot.result()
    waited = log.named("Event.synchronize")
    assert waited
    assert all(w["blocking"] for w in waited)  # the host sleeps on the event, not spins
    assert np.array_equal(result, log.predictors[0].memory)
    slot.release()


def test_the_copy_out_reads_memory_the_next_run_does_not_overwrite(rec_spec) -> None:
    log = Log()
    predictor = _loaded(rec_spec, make_fake_paddle(log))
    first, second = predictor.stage((2, 3, 48, 64)), predictor.stage((2, 3, 48, 64))
    first.input[...] = _batch(1)
    second.input[...] = _batch(2)
    predictor.launch(first)
    predictor.launch(second)  # two in flight: this run rewrites the predictor's memory
    memory = log.predictors[0].memory
    for copy in log.named("Tensor.copy_"):
        assert not np.shares_memory(copy["source"], memory)
    one, two = (np.array(slot.result()) for slot in (first, second))
    assert not np.array_equal(one, two)
    assert np.array_equal(one, predictor.run(_batch(1)))
    assert np.array_equal(two, predictor.run(_batch(2)))
    first.release()
    second.release()


def test_the_recogniser_answers_argmax_pairs_reduced_on_the_gpu(rec_spec) -> None:
    log = Log()
    paddle = make_fake_paddle(log, classes=11)
    full = _loaded(rec_spec, paddle).run(_batch(3, rows=3))
    paired = _loaded(rec_spec, paddle)
    paired.output_argmax()
    log.calls.clear()
    pairs = paired.run(_batch(3, rows=3))
    assert full.shape == (3, 4, 11)
    assert pairs.shape == (3, 4, 2)
    assert np.array_equal(pairs, argmax_pairs(full))
    compute = paddle_lane(paddle, 0, inflight_batches=2).compute_stream.name
    assert [log.named(k)[0]["stream"] for k in ("argmax", "amax", "stack")] == [compute] * 3
    (download,) = log.named("Tensor.copy_")
    assert download["source"].shape == (3, 4, 2)


def test_a_build_that_cannot_bind_a_stream_is_refused(rec_spec) -> None:
    log = Log()
    predictor = GpuPredictor(
        rec_spec, EngineOptions(device="gpu:0"), make_fake_paddle(log, cuda_build=False)
    )
    with pytest.raises(PredictorError, match="set_exec_stream"):
        predictor.load()
    assert "create_predictor" not in log.names()


def test_run_before_load_and_after_close_is_an_error(rec_spec) -> None:
    log = Log()
    predictor = GpuPredictor(rec_spec, EngineOptions(device="gpu:0"), make_fake_paddle(log))
    with pytest.raises(PredictorNotLoadedError):
        predictor.run(_batch(1))
    predictor.load()
    predictor.warmup()
    predictor.close()
    with pytest.raises(PredictorNotLoadedError):
        predictor.stage((1, 3, 48, 64))


def test_gpu_predictor_refuses_cpu(rec_spec) -> None:
    with pytest.raises(PredictorError):
        GpuPredictor(rec_spec, EngineOptions(device="cpu"))


def test_a_device_worker_pipelines_paddle_gpu_batches(rec_spec, prefix) -> None:
    log = Log()
    paddle = make_fake_paddle(log, classes=7)
    predictor = _loaded(rec_spec, paddle)
    options = EngineOptions(device="gpu:0", inflight_batches=2)
    engine = EngineChoice(backend="paddle", options=options)
    spec = DeviceSpec(name="gpu:0", device="gpu:0", stages=("rec",), engine=engine)
    ours, theirs = multiprocessing.Pipe()
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    runner = DeviceWorkerChild(spec=spec, setup=setup, conn=ours)
    runner.use({"rec": predictor})  # asks the recogniser for argmax pairs
    batches = {10: _batch(1), 11: _batch(2)}
    log.calls.clear()
    for batch_id, batch in batches.items():  # both queued, as with inflight_batches = 2
        theirs.send(("run", batch_id, "rec", [shm.put(batch, prefix)], False))
    serving = threading.Thread(target=runner.serve, daemon=True)
    serving.start()
    answers = [theirs.recv(), theirs.recv()]
    theirs.send(("stop",))
    serving.join(timeout=10)
    assert not serving.is_alive()
    assert log.names().count("Predictor.run") == 2
    assert log.names().count("argmax") == 2  # reduced on the device
    for kind, batch_id, outcomes, _ in answers:
        assert kind == "done"
        (outcome,) = outcomes
        assert isinstance(outcome, ItemOk)
        indices, values = outcome.value
        expected = predictor.run(batches[batch_id])
        assert np.array_equal(indices, expected[..., 0].astype(indices.dtype))
        assert np.array_equal(values, expected[..., 1])
