"""`workers.devices`, `gpu_instances` and `cpu_instances` resolved into device worker processes,
and the model sets their engines can serve (the default's replaced where they cannot read it)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from models import paddle_convert
from models.base import EngineBackendError
from models.bundle import load_bundle
from models.packaged import ORIENTATION_MODEL as ORI
from serving.config import AppConfig, build
from serving.errors import ConfigError
from serving.model_sets import load_sets
from serving.service.devices import device_specs, readable_default, without_unread_orientation
from serving.service.runtime import Runtime

PADDLE = {"gpu_backend": "paddle"}
"""GPUs on Paddle, as these tests were written for: "auto" (the default) finds none here."""


def _specs(workers: dict[str, Any], gpus: int) -> list[tuple[str, str]]:
    config = build(AppConfig, {"workers": workers, "engine": PADDLE})
    return [(s.name, s.device) for s in device_specs(config, gpu_count=gpus)]


def test_auto_is_every_gpu_else_one_cpu_worker() -> None:
    assert _specs({}, gpus=2) == [("gpu:0", "gpu:0"), ("gpu:1", "gpu:1")]
    assert _specs({}, gpus=0) == [("cpu#0", "cpu"), ("cpu#1", "cpu")]
    assert _specs({"cpu_instances": 1}, gpus=0) == [("cpu", "cpu")]


def test_instances_multiply_each_device_and_get_numbered_names() -> None:
    workers = {"devices": ["gpu:1", "cpu"], "gpu_instances": 2, "cpu_instances": 3}
    assert _specs(workers, gpus=2) == [
        ("gpu:1#0", "gpu:1"),
        ("gpu:1#1", "gpu:1"),
        ("cpu#0", "cpu"),
        ("cpu#1", "cpu"),
        ("cpu#2", "cpu"),
    ]
    # cpu_instances means nothing where "auto" finds GPUs.
    assert _specs({"cpu_instances": 2}, gpus=1) == [("gpu:0", "gpu:0")]
    assert _specs({"cpu_instances": 2}, gpus=0) == [("cpu#0", "cpu"), ("cpu#1", "cpu")]


def test_a_device_named_twice_is_one_worker() -> None:
    assert _specs({"devices": ["cpu", "cpu"], "cpu_instances": 1}, gpus=0) == [("cpu", "cpu")]


@pytest.mark.parametrize(
    ("cores", "instances", "expected"), [(2, 1, 2), (2, 2, 1), (2, 3, 1), (16, 4, 4)]
)
def test_cpu_instances_share_the_cores_unless_threads_are_set(
    monkeypatch: pytest.MonkeyPatch, cores: int, instances: int, expected: int
) -> None:
    monkeypatch.setattr("serving.config.app.available_cpus", lambda: cores)
    config = build(AppConfig, {"workers": {"cpu_instances": instances}})
    assert config.cpu_threads == expected
    explicit = build(
        AppConfig, {"workers": {"cpu_instances": instances}, "engine": {"cpu_threads": 3}}
    )
    assert explicit.cpu_threads == 3


@pytest.mark.parametrize(
    ("cores", "instances", "engine", "expected"),
    [
        (2, 2, {}, 2),  # the default: a lone batch on every core
        (16, 4, {}, 16),
        (2, 1, {}, 0),  # one worker has the cores already
        (2, 2, {"cpu_lone_threads": 1}, 0),  # never
        (2, 2, {"cpu_threads": 2}, 0),  # no more than its own
        (4, 2, {"cpu_lone_threads": 3}, 3),
    ],
)
def test_cpu_workers_run_lone_batches_on_every_core_unless_told(
    monkeypatch: pytest.MonkeyPatch,
    cores: int,
    instances: int,
    engine: dict[str, int],
    expected: int,
) -> None:
    monkeypatch.setattr("serving.config.app.available_cpus", lambda: cores)
    config = build(AppConfig, {"workers": {"cpu_instances": instances}, "engine": engine})
    assert config.cpu_lone_threads == expected
    specs = device_specs(config, gpu_count=0)
    assert [s.engine.options.lone_threads for s in specs] == [expected] * instances
    # GPU workers never: a GPU batch is not the CPU's.
    gpu = build(AppConfig, {"workers": {"devices": ["gpu:0"]}, "engine": PADDLE})
    assert [s.engine.options.lone_threads for s in device_specs(gpu, gpu_count=1)] == [0]


def test_cpu_instances_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"workers\.cpu_instances"):
        build(AppConfig, {"workers": {"cpu_instances": 0}})


def test_each_worker_gets_engine_options_for_its_own_device() -> None:
    """fp16 and TensorRT reach GPU workers; CPU workers run fp32 without TensorRT. Options once
    built for "cpu" and given to every worker silently dropped both on every GPU."""
    config = build(
        AppConfig,
        {
            "engine": {"precision": "fp16", "use_tensorrt": True, **PADDLE},
            "workers": {"devices": ["gpu:0", "cpu"]},
        },
    )
    runtime = Runtime.build(config, specs=device_specs(config, gpu_count=1), jobs=False)
    engines = {worker.spec.device: worker.spec.engine for worker in runtime.devices.workers}
    assert {device: engine.backend for device, engine in engines.items()} == {
        "gpu:0": "paddle",
        "cpu": "openvino",  # the default CPU engine
    }
    options = {device: engine.options for device, engine in engines.items()}
    assert set(options) == {"gpu:0", "cpu"}
    gpu, cpu = options["gpu:0"], options["cpu"]
    assert (gpu.device, gpu.precision, gpu.use_tensorrt, gpu.enable_mkldnn) == (
        "gpu:0",
        "fp16",
        True,
        False,
    )
    assert (cpu.device, cpu.precision, cpu.use_tensorrt, cpu.enable_mkldnn) == (
        "cpu",
        "fp32",
        False,
        True,
    )


def test_page_orientation_is_served_by_the_devices_whose_engine_reads_it() -> None:
    bundle = load_bundle(
        "embedded:PP-OCRv5_mobile_det", "embedded:PP-OCRv5_mobile_rec", ori=f"embedded:{ORI}"
    )
    workers = {"devices": ["gpu:0", "cpu"], "cpu_instances": 1}
    config = build(AppConfig, {"workers": workers, "engine": PADDLE})
    specs = device_specs(config, gpu_count=1)  # the GPU on Paddle, which reads no ONNX model
    assert all("ori" in spec.stages for spec in specs)
    served, kept = without_unread_orientation(bundle, specs)
    assert served.ori is bundle.ori
    assert [("ori" in spec.stages) for spec in kept] == [False, True]
    paddle_only = [spec for spec in specs if spec.device.startswith("gpu")]
    served, kept = without_unread_orientation(bundle, paddle_only)
    assert served.ori is None
    assert "ori" not in kept[0].stages


def _paddle_cpu(paddle_dir: Path) -> AppConfig:
    engine = {"cpu_backend": "paddle", "paddle_dir": str(paddle_dir)}
    return build(AppConfig, {"engine": engine, "workers": {"cpu_instances": 1}})


def test_an_engine_that_cannot_read_the_default_serves_the_next_set_as_default(
    tmp_path: Path,
) -> None:
    """The Paddle engine reads PP-OCRv6 small (ONNX) only through its X2Paddle conversion; with
    none in `paddle_dir`, PP-OCRv5 mobile is the default instead, and why is on record."""
    config = _paddle_cpu(tmp_path)
    sets = readable_default(load_sets(config.models), device_specs(config, gpu_count=0))
    assert sets.default.name == "PP-OCRv5_mobile"
    assert (sets.default.stage("det"), sets.default.stage("rec")) == ("det", "rec")
    assert sets.extra == ()
    reason = sets.unavailable["PP-OCRv6_small"]
    assert "make convert-paddle" in reason
    assert reason.endswith("PP-OCRv5_mobile is the default instead")


def test_with_its_conversion_in_the_cache_the_paddle_engine_serves_the_default(
    tmp_path: Path,
) -> None:
    config = _paddle_cpu(tmp_path)
    loaded = load_sets(config.models)
    for spec in (loaded.default.bundle.det, loaded.default.bundle.rec):  # stand-in conversions
        entry = paddle_convert.cache_entry(spec, tmp_path)
        entry.mkdir()
        for name in ("inference.json", "inference.pdiparams", "provenance.json"):
            (entry / name).write_text("{}")
        shutil.copyfile(spec.directory / "inference.yml", entry / "inference.yml")
    sets = readable_default(loaded, device_specs(config, gpu_count=0))
    assert sets is loaded
    assert sets.default.name == "PP-OCRv6_small"


def test_a_default_no_set_can_replace_fails_the_start_with_the_command_to_run(
    tmp_path: Path,
) -> None:
    config = _paddle_cpu(tmp_path)
    alone = dataclasses.replace(load_sets(config.models), extra=())
    with pytest.raises(EngineBackendError, match="make convert-paddle"):
        readable_default(alone, device_specs(config, gpu_count=0))


def test_a_server_on_the_paddle_engine_without_the_conversion_says_what_it_serves(
    tmp_path: Path,
) -> None:
    runtime = Runtime.build(_paddle_cpu(tmp_path), jobs=False)
    models = runtime.describe_models()
    assert models["default"] == "PP-OCRv5_mobile"
    assert [(m["name"], m["stages"]["rec"]) for m in models["models"]] == [
        ("PP-OCRv5_mobile", "rec")
    ]
    (left_out,) = models["unavailable"]
    assert left_out["name"] == "PP-OCRv6_small"
    assert "make convert-paddle" in left_out["reason"]
    (worker,) = runtime.devices.workers
    assert worker.spec.engine.backend == "paddle"
    assert "rec@PP-OCRv5_mobile" not in worker.spec.stages
    assert worker.setup.model_dirs["rec"].endswith("PP-OCRv5_mobile_rec")
