"""What the Paddle GPU path (`models.paddle_device`, `models.gpu_predictor`) relies on, checked
on Paddle's CPU build: numpy views of tensor memory, DLPack wrapping without a copy, `copy_`
into that memory, `predictor.run(list[Tensor])` answering as the CPU predictor does, its output
copied out of the predictor's memory, and the device-side argmax. The GPU-only parts (pinned
memory, streams, asynchronous copies) are unit-tested against a fake and run by tests/gpu."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions
from models.paddle_device import detached_output, host_array, host_tensor
from models.paddle_predictor import PaddlePredictor, build_config
from models.spec import load_model_spec
from pipelines.rec_postprocess import argmax_pairs

pytestmark = pytest.mark.integration

paddle = pytest.importorskip("paddle")


def _rec_batch(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=(2, 3, 48, 320)).astype(np.float32)


def test_host_array_is_the_tensors_memory_and_keeps_it_alive() -> None:
    tensor = paddle.to_tensor(np.arange(16, dtype=np.uint8))
    view = host_array(tensor, 12)
    assert view.shape == (12,)
    assert int(view.ctypes.data) == int(tensor.data_ptr())
    view[0] = 200
    assert int(tensor.numpy()[0]) == 200
    del tensor
    gc.collect()
    assert view.tolist() == [200, *range(1, 12)]


def test_host_tensor_wraps_numpy_memory_and_copy_writes_into_it() -> None:
    host = np.zeros((2, 3), dtype=np.float32)
    wrapped = host_tensor(paddle, host)
    assert int(wrapped.data_ptr()) == int(host.ctypes.data)
    source = paddle.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    wrapped.copy_(source, False)
    assert host.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert int(wrapped.data_ptr()) == int(host.ctypes.data)  # written in place, not replaced


def test_tensor_run_reads_like_the_cpu_predictor_and_detaches_its_output() -> None:
    spec = load_model_spec(embedded_model_dir("PP-OCRv5_mobile_rec"), "rec")
    options = EngineOptions(cpu_threads=2)
    reference = PaddlePredictor(spec, options)
    reference.load()
    predictor = paddle.inference.create_predictor(build_config(spec, options, paddle.inference))
    first, second = _rec_batch(1), _rec_batch(2)
    (output,) = predictor.run([host_tensor(paddle, first)])
    full = detached_output(paddle, output, argmax=False)
    pairs = detached_output(paddle, output, argmax=True)
    expected = reference.run(first)
    assert np.array_equal(full.numpy(), expected)
    assert np.array_equal(pairs.numpy(), argmax_pairs(expected))
    assert int(full.data_ptr()) != int(output.data_ptr())
    predictor.run([host_tensor(paddle, second)])
    assert np.array_equal(full.numpy(), expected)  # the next run did not touch the copy
    reference.close()


def test_device_argmax_takes_the_first_of_equal_values_as_numpy_does() -> None:
    scores = np.array([[[0.1, 0.7, 0.7, 0.2], [0.5, 0.5, 0.1, 0.5]]], dtype=np.float32)
    pairs = detached_output(paddle, paddle.to_tensor(scores), argmax=True).numpy()
    assert np.array_equal(pairs, argmax_pairs(scores))
    assert pairs[0, :, 0].tolist() == [1.0, 0.0]
