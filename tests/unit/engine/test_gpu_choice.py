"""`engine.gpu_backend = "auto"` (issue 39, item 8): which engine GPU device workers run, from
what torch and Paddle report (their packages' versions and the GPUs a CUDA build counts, both
patched here), and what the server does with the choice."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from models.base import EngineBackendError
from serving.config import AppConfig, build
from serving.engine import gpu_choice
from serving.engine.choice import engine_choice
from serving.engine.gpu_choice import EngineProbe, GpuEngineChoice, decide, probe
from serving.errors import ConfigError
from serving.service import devices

pytestmark = pytest.mark.unit


def _versions(**installed: str) -> Callable[[str], str | None]:
    return lambda name: installed.get(name.replace("-", "_"))


def _counts(gpus: int) -> Callable[[str], str]:
    return lambda code: f"some warning\n{gpus}\n"


def _failing(code: str) -> str:
    raise subprocess.CalledProcessError(1, "python")


def _never(code: str) -> str:
    raise AssertionError("a CPU build is not imported")


def test_torch_is_read_from_its_package_and_counts_its_gpus() -> None:
    assert probe("torch", version=_versions(), run=_never).why_not() == "torch not installed"
    cpu = probe("torch", version=_versions(torch="2.13.0+cpu"), run=_never)
    assert cpu.why_not() == "torch 2.13.0+cpu is a CPU build"
    cuda = probe("torch", version=_versions(torch="2.13.0"), run=_counts(2))
    assert (cuda.cuda_build, cuda.gpus, cuda.why_not()) == (True, 2, "")
    none = probe("torch", version=_versions(torch="2.13.0"), run=_counts(0))
    assert none.why_not() == "torch 2.13.0 sees no CUDA device"
    broken = probe("torch", version=_versions(torch="2.13.0"), run=_failing)
    assert broken.why_not() == "torch 2.13.0 could not count GPUs (CalledProcessError)"


def test_paddle_is_a_gpu_build_only_as_paddlepaddle_gpu() -> None:
    assert probe("paddle", version=_versions(), run=_never).why_not() == "paddle not installed"
    cpu = probe("paddle", version=_versions(paddlepaddle="3.2.2"), run=_never)
    assert cpu.why_not() == "paddle 3.2.2 is a CPU build"
    gpu = probe("paddle", version=_versions(paddlepaddle_gpu="3.2.2"), run=_counts(1))
    assert (gpu.version, gpu.gpus, gpu.why_not()) == ("3.2.2", 1, "")


TORCH_GPU = EngineProbe(name="torch", version="2.13.0", cuda_build=True, gpus=2)
TORCH_CPU = EngineProbe(name="torch", version="2.13.0+cpu")
NO_TORCH = EngineProbe(name="torch", version=None)
PADDLE_GPU = EngineProbe(name="paddle", version="3.2.2", cuda_build=True, gpus=1)
PADDLE_CPU = EngineProbe(name="paddle", version="3.2.2")


def test_torch_first_then_paddle_then_the_cpu() -> None:
    assert decide(TORCH_GPU, PADDLE_GPU, 2) == GpuEngineChoice(
        backend="torch", gpus=2, reason="torch 2.13.0 sees 2 CUDA device(s)"
    )
    assert decide(NO_TORCH, PADDLE_GPU, 1) == GpuEngineChoice(
        backend="paddle",
        gpus=1,
        reason="paddle 3.2.2 sees 1 CUDA device(s); torch not installed",
    )
    cpu = decide(TORCH_CPU, PADDLE_CPU, 0)
    assert (cpu.backend, cpu.gpus) == (None, 0)
    assert cpu.reason == "torch 2.13.0+cpu is a CPU build; paddle 3.2.2 is a CPU build"
    assert cpu.describe() == {"setting": "auto", "backend": "cpu", "gpus": 0, "reason": cpu.reason}


def test_gpus_no_engine_uses_are_named_with_what_to_run() -> None:
    choice = decide(NO_TORCH, PADDLE_CPU, 4)
    assert choice.backend is None
    assert "the kernel lists 4 NVIDIA GPU(s): `make serve-gpu`" in choice.reason


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Callable[[GpuEngineChoice], None]:
    """Sets what `choose_gpu_engine` finds on this host."""

    def found(choice: GpuEngineChoice) -> None:
        monkeypatch.setattr(gpu_choice, "choose_gpu_engine", lambda: choice)
        monkeypatch.setattr(devices, "choose_gpu_engine", lambda: choice)
        monkeypatch.setattr("serving.engine.choice.choose_gpu_engine", lambda: choice)

    return found


def test_auto_is_the_default_and_only_for_gpus() -> None:
    assert AppConfig().engine.gpu_backend == "auto"
    with pytest.raises(ConfigError, match=r"engine\.cpu_backend"):
        build(AppConfig, {"engine": {"cpu_backend": "auto"}})


def test_the_choice_makes_the_devices_and_their_engine(host) -> None:
    config = AppConfig()
    host(decide(TORCH_GPU, PADDLE_GPU, 2))
    assert [s.device for s in devices.device_specs(config)] == ["gpu:0", "gpu:1"]
    assert {s.engine.backend for s in devices.device_specs(config)} == {"torch"}
    assert engine_choice(config, "gpu:1").backend == "torch"
    assert devices.gpu_engine(config).backend == "torch"
    host(decide(TORCH_CPU, PADDLE_CPU, 0))
    assert {s.device for s in devices.device_specs(config)} == {"cpu"}
    with pytest.raises(EngineBackendError, match=r"gpu:0: engine\.gpu_backend = 'auto' found no"):
        engine_choice(config, "gpu:0")


def test_no_probe_where_no_gpu_is_asked_for_or_the_engine_is_named(host) -> None:
    host(decide(TORCH_GPU, PADDLE_GPU, 2))
    cpu_only = build(AppConfig, {"workers": {"devices": ["cpu"]}})
    assert devices.gpu_engine(cpu_only) == GpuEngineChoice(
        backend=None, gpus=0, reason="workers.devices names no GPU"
    )
    named = build(AppConfig, {"engine": {"gpu_backend": "paddle"}})
    assert devices.gpu_engine(named).describe() == {
        "setting": "paddle",
        "backend": "paddle",
        "reason": "configured",
    }
