"""Each gpu:N device worker sees GPU N alone, and "auto" says when GPUs go unused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from models.engine_options import EngineOptions
from models.registry import EngineChoice
from serving.service import devices
from serving.workers.device_worker import DeviceSpec, isolate_gpu


def spec(device: str) -> DeviceSpec:
    engine = EngineChoice(backend="torch", options=EngineOptions(device=device, precision="fp32"))
    return DeviceSpec(name=device, device=device, stages=("det", "rec"), engine=engine)


def test_gpu_worker_sees_only_its_gpu_as_device_0() -> None:
    environ: dict[str, str] = {}
    isolated = isolate_gpu(spec("gpu:3"), environ)
    assert environ["CUDA_VISIBLE_DEVICES"] == "3"
    assert isolated.engine.options.device == "gpu:0"
    assert isolated.name == "gpu:3"  # logs and metrics keep the configured name


def test_an_existing_visible_list_is_indexed() -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "4,6"}
    isolate_gpu(spec("gpu:1"), environ)
    assert environ["CUDA_VISIBLE_DEVICES"] == "6"


def test_cpu_workers_are_left_alone() -> None:
    environ: dict[str, str] = {}
    assert isolate_gpu(spec("cpu"), environ) == spec("cpu")
    assert environ == {}


def test_unused_gpus_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "0000:01:00.0").mkdir()
    assert devices.nvidia_gpus_present(tmp_path) == 1
    assert devices.nvidia_gpus_present(tmp_path / "absent") == 0
    monkeypatch.setattr(devices, "nvidia_gpus_present", lambda: 1)
    with caplog.at_level(logging.WARNING):
        assert devices.visible_gpus("no-such-backend") == 0
    assert 'gpu_backend = "torch"' in caplog.text
