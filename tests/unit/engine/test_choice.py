"""Engine options: their checks, and the options `[engine]` gives each kind of device."""

from __future__ import annotations

from typing import Any

import pytest

from models.engine_options import EngineOptions, EngineOptionsError, device_kind
from serving.config import AppConfig, build
from serving.engine.choice import engine_choice, engine_options

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "cuda"}, "device"),
        ({"device": "gpu"}, "device"),
        ({"device": "gpu:x"}, "device"),
        ({"use_tensorrt": True}, "GPU"),
        ({"cpu_threads": 0}, "cpu_threads"),
        ({"mkldnn_cache_capacity": -1}, "mkldnn_cache_capacity"),
        ({"device": "gpu:0", "precision": "int8"}, "precision"),
        ({"device": "gpu:0", "trt_max_batch_size": 0}, "trt_max_batch_size"),
    ],
)
def test_engine_options_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(EngineOptionsError, match=message):
        EngineOptions(**kwargs)


def test_engine_options_device_id_and_kind() -> None:
    assert EngineOptions(device="gpu:3").device_id == 3
    assert EngineOptions(device="gpu:3").kind == "gpu"
    assert EngineOptions(device="cpu").device_id == 0
    assert not EngineOptions().is_gpu
    assert (device_kind("cpu"), device_kind("gpu:12")) == ("cpu", "gpu")


def test_gpu_settings_reach_gpus_and_cpu_settings_the_cpu() -> None:
    engine = build(
        AppConfig,
        {"engine": {"precision": "fp16", "use_tensorrt": True, "trt_cache_dir": "/tmp/trt"}},
    ).engine
    gpu = engine_options(engine, "gpu:1", cpu_threads=3)
    assert (gpu.device, gpu.precision, gpu.use_tensorrt, gpu.enable_mkldnn) == (
        "gpu:1",
        "fp16",
        True,
        False,
    )
    assert (gpu.trt_use_static, gpu.trt_cache_dir) == (True, "/tmp/trt")
    cpu = engine_options(engine, "cpu", cpu_threads=3)
    assert (cpu.precision, cpu.use_tensorrt, cpu.enable_mkldnn, cpu.cpu_threads) == (
        "fp32",
        False,
        True,
        3,
    )


def test_each_device_kind_gets_its_configured_backend() -> None:
    config = build(AppConfig, {"engine": {"cpu_backend": "fake", "gpu_backend": "paddle"}})
    assert engine_choice(config, "cpu").backend == "fake"
    gpu = engine_choice(config, "gpu:0")
    assert (gpu.backend, gpu.options.device) == ("paddle", "gpu:0")
