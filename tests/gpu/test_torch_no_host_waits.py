"""The torch engine's forwards on a CUDA GPU queue their work and return without waiting for it
(issue 27): CUDA's sync debug mode raises at any synchronising call inside a det or rec forward.
Compiled (`[engine.torch] compile = "default"`, Inductor's Triton kernels) at buckets, they
answer what eager answers. `OCR_GPU_TESTS_ON_CPU=1` runs the first on the CPU (no
synchronisation exists there; tests/integration/test_torch_host_reads.py counts host reads).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models import convert
from models.bundle import load_bundle
from models.engine_options import EngineOptions, Precision
from models.torch_backend import TorchPredictor
from models.torch_options import TorchOptions
from serving.config import EngineConfig, ModelsConfig
from tests.gpu.conftest import DEVICE as MAYBE_DEVICE
from tests.gpu.conftest import requires_cuda

pytestmark = requires_cuda
DEVICE = MAYBE_DEVICE or "gpu:0"

SHAPES = {"det": [(1, 3, 960, 736), (4, 3, 640, 640)], "rec": [(6, 3, 48, 320), (96, 3, 48, 1280)]}


def _predictors(
    models: ModelsConfig, torch_options: TorchOptions, precision: Precision = "fp32"
) -> dict[str, TorchPredictor]:
    bundle = load_bundle(models.det, models.rec)
    cache = Path(EngineConfig().onnx_dir)  # the bundle's are ONNX already; else the conversions
    made: dict[str, TorchPredictor] = {}
    for paddle_or_onnx in (bundle.det, bundle.rec):
        spec = convert.find_onnx(paddle_or_onnx, cache) or paddle_or_onnx
        predictor = TorchPredictor(
            spec, EngineOptions(device=DEVICE, torch=torch_options, precision=precision)
        )
        predictor.load()
        if spec.kind == "rec":
            predictor.output_argmax()
        made[spec.kind] = predictor
    return made


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_forwards_do_not_synchronise(gpu_models: ModelsConfig, precision: Precision) -> None:
    import torch

    if precision == "fp16" and not DEVICE.startswith("gpu"):
        pytest.skip("fp16 (autocast) is for GPUs")
    predictors = _predictors(gpu_models, TorchOptions(compile="off"), precision)
    device = torch.device(predictors["det"].torch_device)
    rng = np.random.default_rng(0)
    for kind, shapes in SHAPES.items():
        predictor = predictors[kind]
        assert predictor.host_reads_free
        for shape in shapes:
            x = torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32)).to(device)
            predictor.forward(x)  # warm: allocator, cuDNN plans
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                predictor.forward(x)
            finally:
                if device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_launches_of_uint8_pixels_do_not_synchronise(
    gpu_models: ModelsConfig, precision: Precision
) -> None:
    """The server's path (issue 40): uint8 pixels staged with each row's size, copied in,
    normalised on the device, the model, the copy out; `launch` returns without waiting (the
    slot's result waits by design, outside the mode)."""
    import torch

    if precision == "fp16" and not DEVICE.startswith("gpu"):
        pytest.skip("fp16 (autocast) is for GPUs")
    from loadtest.gpu.probes import pixel_sizes

    predictors = _predictors(gpu_models, TorchOptions(), precision)
    cuda = predictors["det"].torch_device.startswith("cuda")
    rng = np.random.default_rng(4)
    for kind, shapes in SHAPES.items():
        predictor = predictors[kind]
        for shape in shapes:
            pixels = rng.integers(0, 256, shape, dtype=np.uint8)
            for checked in (False, True):  # the first warms the allocator and cuDNN plans
                slot = predictor.stage_pixels(shape)
                slot.input[...] = pixels
                slot.sizes = pixel_sizes(kind, shape)
                if cuda and checked:
                    torch.cuda.synchronize()
                    torch.cuda.set_sync_debug_mode("error")
                try:
                    predictor.launch(slot)
                finally:
                    if cuda:
                        torch.cuda.set_sync_debug_mode("default")
                assert slot.result().shape[0] == shape[0]
                slot.release()


@pytest.mark.timeout(1200)
def test_compiled_buckets_answer_what_eager_answers(gpu_models: ModelsConfig) -> None:
    if not DEVICE.startswith("gpu"):
        pytest.skip(
            "Inductor's CPU code generation takes minutes a model; see test_torch_host_reads"
        )
    import torch

    buckets = TorchOptions(shapes="buckets", compile="off")
    eager = _predictors(gpu_models, buckets)
    compiled = _predictors(gpu_models, TorchOptions(shapes="buckets", compile="default"))
    rng = np.random.default_rng(1)
    for kind, shapes in SHAPES.items():
        for shape in shapes:
            batch = rng.uniform(-1, 1, shape).astype(np.float32)
            want = eager[kind].run(batch)
            got = compiled[kind].run(batch)
            assert got.shape == want.shape
            if kind == "rec":  # argmax pairs: the same classes nearly everywhere
                assert np.mean(got[..., 0] == want[..., 0]) > 0.999
                np.testing.assert_allclose(got[..., 1], want[..., 1], atol=2e-3)
            else:
                np.testing.assert_allclose(got, want, atol=2e-3)
    torch.cuda.synchronize()
