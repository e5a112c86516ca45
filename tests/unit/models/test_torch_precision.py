"""`engine.precision` resolved per device and engine backend (`models.torch_precision`), and the
options and ready report each device worker gets from it (issue 40)."""

from __future__ import annotations

import dataclasses

import pytest

from models.engine_options import EngineOptions
from models.torch_precision import PrecisionPlan, choose_precision, fall_back
from serving.config import AppConfig, EngineConfig
from serving.engine.choice import engine_choice, engine_options, precision_report
from serving.engine.gpu_choice import GpuEngineChoice

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("setting", "gpu", "backend", "precision", "fallback"),
    [
        ("auto", True, "torch", "fp16", True),
        ("auto", False, "torch", "fp32", False),
        ("auto", True, "paddle", "fp32", False),
        ("auto", False, "openvino", "fp32", False),
        ("fp32", True, "torch", "fp32", False),
        ("fp16", True, "torch", "fp16", False),
        ("fp16", False, "torch", "fp16", False),  # the CPU's stand-in for a GPU's fp16
        ("fp16", True, "paddle", "fp16", False),
        ("fp16", False, "paddle", "fp32", False),
        ("bf16", False, "torch", "bf16", False),
        ("bf16", True, "torch", "bf16", False),
        ("bf16", True, "paddle", "fp32", False),
    ],
)
def test_each_setting_resolves_per_device_and_backend(
    setting: str, gpu: bool, backend: str, precision: str, fallback: bool
) -> None:
    plan = choose_precision(setting, gpu=gpu, backend=backend)  # type: ignore[arg-type]
    assert (plan.precision, plan.fallback) == (precision, fallback)
    assert plan.reason.startswith("auto" if setting == "auto" else "engine.precision")


def test_auto_is_the_default_fp16_on_a_gpu_and_fp32_on_the_cpu() -> None:
    engine = EngineConfig()
    assert engine.precision == "auto"
    gpu = engine_options(engine, "gpu:0", 2)  # gpu_backend "auto": torch, where it sees a GPU
    assert (gpu.precision, gpu.precision_fallback) == ("fp16", True)
    assert gpu.precision_reason.startswith("auto: fp16 autocast on a GPU")
    cpu = engine_options(dataclasses.replace(engine, cpu_backend="torch"), "cpu", 2)
    assert (cpu.precision, cpu.precision_fallback) == ("fp32", False)
    assert "on the CPU" in cpu.precision_reason
    assert engine_options(engine, "gpu:0", 2, backend="paddle").precision == "fp32"


@pytest.mark.parametrize(("found", "precision"), [("torch", "fp16"), ("paddle", "fp32")])
def test_auto_follows_the_gpu_engine_chosen_at_start_up(
    monkeypatch: pytest.MonkeyPatch, found: str, precision: str
) -> None:
    choice = GpuEngineChoice(backend=found, gpus=1, reason="faked CUDA device")
    monkeypatch.setattr("serving.engine.choice.choose_gpu_engine", lambda: choice)
    chosen = engine_choice(AppConfig(), "gpu:0")
    assert (chosen.backend, chosen.options.precision) == (found, precision)


def test_falling_back_says_why_and_does_not_fall_back_again() -> None:
    plan = choose_precision("auto", gpu=True, backend="torch")
    fp32 = fall_back(plan, "the warm-up page read ['W@rm']")
    assert (fp32.precision, fp32.fallback) == ("fp32", False)
    assert (
        fp32.reason == f"{plan.reason}; fell back to fp32: at fp16 the warm-up page read ['W@rm']"
    )


def test_the_ready_report_says_the_resolved_precision_and_why() -> None:
    options = engine_options(EngineConfig(), "gpu:0", 2)
    assert precision_report({"det": object()}, options) == {
        "precision": "fp16",
        "precision_reason": options.precision_reason,
    }
    explicit = EngineOptions(device="gpu:0", precision="fp16")
    assert precision_report({"det": object()}, explicit)["precision_reason"] == "engine.precision"
    assert PrecisionPlan("fp32", "x").fallback is False
