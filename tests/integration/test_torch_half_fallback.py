"""The fallback of an "auto" half precision to fp32 on the real torch engine (issue 40): a device
worker whose models read the warm-up page wrong at fp16 loads them again at fp32, reads the page
right, and reports fp32 with why. On the CPU, with the options "auto" gives a GPU
(`models.torch_precision`) and a forward that reads garbage at half precision injected; the
worker's load, warm-up check and reload are the real ones."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from models.registry import EngineChoice
from models.torch_precision import choose_precision
from serving.config import AppConfig, EngineConfig
from serving.engine.choice import engine_choice, precision_report
from serving.engine.warmup import WARMUP_TEXT
from serving.workers.device_worker import DeviceSpec, DeviceWorkerChild, WorkerSetup
from tests.conftest import ONE_SET

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")


@pytest.fixture
def half_reads_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    from models.torch_backend import TorchPredictor

    forward = TorchPredictor.forward

    def garbled(self: TorchPredictor, x: Any) -> Any:
        y = forward(self, x)
        return y if self.options.precision == "fp32" else y * 0  # no text, no boxes

    monkeypatch.setattr(TorchPredictor, "forward", garbled)


@pytest.mark.usefixtures("half_reads_garbage")
def test_a_torch_worker_reloads_at_fp32_when_its_warm_up_page_reads_wrong_at_fp16(
    onnx_dir: str,
) -> None:
    engine = dataclasses.replace(
        EngineConfig(), cpu_backend="torch", cpu_threads=2, onnx_dir=onnx_dir
    )
    options = engine_choice(AppConfig(models=ONE_SET, engine=engine), "cpu").options
    plan = choose_precision("auto", gpu=True, backend="torch")  # what a GPU's worker gets
    half = dataclasses.replace(
        options,
        precision=plan.precision,
        precision_reason=plan.reason,
        precision_fallback=plan.fallback,
    )
    spec = DeviceSpec(
        name="cpu",
        device="cpu",
        stages=("det", "rec"),
        engine=EngineChoice(backend="torch", options=half),
    )
    setup = WorkerSetup(model_dirs={"det": ONE_SET.det, "rec": ONE_SET.rec}, shm_prefix="unused_")
    worker = DeviceWorkerChild(spec=spec, setup=setup, conn=None)  # type: ignore[arg-type]
    worker.load()
    at_half = dict(worker.predictors)
    assert {p.options.precision for p in at_half.values()} == {"fp16"}
    try:
        info = worker.warm_up()
        assert len(info["warmup_texts"]) == len(WARMUP_TEXT)
        assert all(worker.predictors[s] is not at_half[s] for s in at_half)  # loaded again
        assert {p.options.precision for p in worker.predictors.values()} == {"fp32"}
        report = precision_report(worker.predictors, worker.spec.engine.options)
        assert report["precision"] == "fp32"
        assert report["precision_reason"].startswith(plan.reason + "; fell back to fp32: at fp16")
        assert "the warm-up page read [], expected" in report["precision_reason"]
    finally:
        worker.close()
