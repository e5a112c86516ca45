"""A device worker whose "auto" precision resolved to fp16 reads its warm-up page again at fp32
when the page read wrong at fp16, and says so in its ready report (`models.torch_precision`); an
explicit precision that reads wrong fails the worker, as before. The page's text is faked by the
precision the predictors run at; tests/integration/test_torch_half_fallback.py drives the real
torch engine."""

from __future__ import annotations

import pytest

from models.registry import EngineChoice
from serving.config import AppConfig, EngineConfig
from serving.engine.choice import engine_options, precision_report
from serving.engine.warmup import WARMUP_TEXT, WarmupMismatch
from serving.workers.device_worker import DeviceSpec, DeviceWorkerChild, WorkerSetup

pytestmark = pytest.mark.unit

GARBLED = ["W@rm-up p@ge", "0CR"]


@pytest.fixture(autouse=True)
def half_reads_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    def read(predictors: dict[str, object], _model_dirs: dict[str, str]) -> list[str]:
        ran_at = {getattr(p, "ran_at", None) for p in predictors.values()}
        return list(WARMUP_TEXT) if ran_at == {"fp32"} else GARBLED

    monkeypatch.setattr("serving.workers.device_worker.warm_up_page", read)


def _worker(precision: str) -> DeviceWorkerChild:
    engine = EngineConfig(precision=precision)  # type: ignore[arg-type]
    options = engine_options(engine, "gpu:0", 1, backend="torch")
    choice = EngineChoice(backend="tests.fakes.predictors:PRECISION_FAKE", options=options)
    spec = DeviceSpec(name="gpu:0", device="gpu:0", stages=("det", "rec"), engine=choice)
    models = AppConfig().models
    setup = WorkerSetup(model_dirs={"det": models.det, "rec": models.rec}, shm_prefix="unused_")
    worker = DeviceWorkerChild(spec=spec, setup=setup, conn=None)  # type: ignore[arg-type]
    worker.load()
    return worker


def _ran_at(worker: DeviceWorkerChild) -> set[str]:
    return {p.ran_at for p in worker.predictors.values()}


def test_auto_falls_back_to_fp32_when_the_warm_up_page_reads_wrong_at_fp16() -> None:
    worker = _worker("auto")
    assert _ran_at(worker) == {"fp16"}
    info = worker.warm_up()
    assert info["warmup_texts"] == list(WARMUP_TEXT)
    assert _ran_at(worker) == {"fp32"}  # loaded again, at fp32
    report = precision_report(worker.predictors, worker.spec.engine.options)
    assert report["precision"] == "fp32"
    assert report["precision_reason"].startswith("auto: fp16 autocast on a GPU")
    assert (
        f"; fell back to fp32: at fp16 the warm-up page read {GARBLED!r}"
        in (report["precision_reason"])
    )
    assert not worker.spec.engine.options.precision_fallback


def test_auto_keeps_fp16_where_the_warm_up_page_reads_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("serving.workers.device_worker.warm_up_page", lambda *_: list(WARMUP_TEXT))
    worker = _worker("auto")
    worker.warm_up()
    assert _ran_at(worker) == {"fp16"}
    assert precision_report(worker.predictors, worker.spec.engine.options)["precision"] == "fp16"


def test_an_explicit_fp16_that_reads_wrong_fails_the_worker() -> None:
    worker = _worker("fp16")
    with pytest.raises(WarmupMismatch, match="warm-up page read"):
        worker.warm_up()
    assert _ran_at(worker) == {"fp16"}
